"""The dev cluster's kubelet log endpoint: a pod's kept output over HTTPS on loopback, cut
as a kubelet cuts it."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from goalkeeper.devcluster.containerlogs import ContainerLogServer, tail


def fetch(port: int, path: str) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # as the API server reaches a kubelet by default
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ContainerLogServer]:
    def paths(namespace: str, pod: str) -> tuple[Path, Path]:
        return tmp_path / namespace / f"{pod}.stdout", tmp_path / namespace / f"{pod}.stderr"

    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "web-1.stdout").write_text("processed 1 of 4\nprocessed 2 of 4\n")
    (tmp_path / "shop" / "web-1.stderr").write_text("warning: slow disk\n")
    started = ContainerLogServer(paths).start()
    yield started
    started.stop()


def test_a_pods_output_is_served_stdout_then_stderr(server: ContainerLogServer) -> None:
    status, text = fetch(server.port, "/containerLogs/shop/web-1/web")
    assert status == 200
    assert text == "processed 1 of 4\nprocessed 2 of 4\nwarning: slow disk\n"
    status, text = fetch(server.port, "/containerLogs/shop/web-1/web?tailLines=2&follow=true")
    assert (status, text) == (200, "processed 2 of 4\nwarning: slow disk\n")


def test_unknown_pods_and_odd_paths_are_refused(server: ContainerLogServer) -> None:
    assert fetch(server.port, "/containerLogs/shop/nope/web")[0] == 404
    assert fetch(server.port, "/containerLogs/shop/../web-1")[0] == 400
    assert fetch(server.port, "/pods")[0] == 404


def test_tail_cuts_lines_then_bytes() -> None:
    text = b"a\nb\nc\n"
    assert tail(text, 2, None) == b"b\nc\n"
    assert tail(text, None, 3) == b"a\nb"
    assert tail(text, 0, None) == b""
    assert tail(text, 5, 2) == b"a\n"
