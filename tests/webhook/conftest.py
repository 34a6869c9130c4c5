"""Fixtures for the webhook tests: a real ``python -m webhook serve`` per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.webhook_builders import Server, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One webhook server for a test module (default configuration)."""
    s = start_server(tmp_path_factory.mktemp("webhook-server"))
    try:
        yield s
    finally:
        s.stop()
