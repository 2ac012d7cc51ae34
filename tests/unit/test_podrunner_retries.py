"""The pod runner rides out an API server that restarts or sheds load, as a kubelet does:
which failures it waits out, and that it stops waiting when the runner stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException

from goalkeeper.devcluster.podrunner import PodRunner, _passing


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[PodRunner]:
    """A runner never started: its calls are made by the tests themselves."""
    kubeconfig = tmp_path / "kubeconfig"
    cluster = {"server": "https://127.0.0.1:1", "certificate-authority-data": "Y2E="}
    kubeconfig.write_text(yaml.safe_dump({"clusters": [{"name": "c", "cluster": cluster}]}))
    made = PodRunner(kubeconfig)
    yield made
    made.stop()


def refused() -> Exception:
    return urllib3.exceptions.MaxRetryError(None, "/", reason=ConnectionRefusedError(111))  # type: ignore[arg-type]


def test_which_failures_are_waited_out() -> None:
    assert _passing(refused())
    assert _passing(urllib3.exceptions.ProtocolError("Connection aborted."))
    assert _passing(ApiException(status=0, reason="SSLError"))
    assert _passing(ApiException(status=429, reason="Too Many Requests"))
    assert _passing(ApiException(status=503, reason="Service Unavailable"))
    not_ready = ApiException(status=403, reason="Forbidden")
    not_ready.body = '{"message": "not yet ready to handle request"}'
    assert _passing(not_ready)
    assert not _passing(ApiException(status=403, reason="Forbidden"))
    assert not _passing(ApiException(status=404, reason="Not Found"))
    assert not _passing(ValueError("a bug"))


def test_a_status_write_waits_out_an_outage(runner: PodRunner) -> None:
    failures = [refused(), ApiException(status=503), ApiException(status=429)]
    calls = []

    def write() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "written"

    assert runner._patient(write, "status of ns/pod") == "written"
    assert len(calls) == 4


def test_gone_objects_end_a_write_quietly_and_refusals_are_raised(runner: PodRunner) -> None:
    def gone() -> None:
        raise ApiException(status=404, reason="Not Found")

    runner._retrying(gone, "status of ns/pod")

    def refused_for_good() -> None:
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(ApiException):
        runner._retrying(refused_for_good, "status of ns/pod")


def test_waiting_ends_when_the_runner_stops(runner: PodRunner) -> None:
    tried = threading.Event()

    def down() -> None:
        tried.set()
        raise refused()

    stopper = threading.Thread(target=lambda: tried.wait(10) and runner._stopping.set())
    stopper.start()
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        runner._patient(down, "status of ns/pod")
    stopper.join()
