"""Fixtures the step tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.model_server import ModelServer


@pytest.fixture
def server() -> Iterator[ModelServer]:
    """A scripted OpenAI-compatible model server on loopback, for one test."""
    with ModelServer() as s:
        yield s
