"""Checks ``python -m webhook serve`` makes before gunicorn starts, in-process."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.webhook_builders import make_tls
from webhook import cli


def test_an_expired_certificate_is_refused_naming_the_date(tmp_path: Path) -> None:
    tls = make_tls(tmp_path)
    cli.check_tls(str(tls.cert), str(tls.key))
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=4000)
    with pytest.raises(cli.UsageError, match="expired on"):
        cli.check_tls(str(tls.cert), str(tls.key), now=later)


@pytest.mark.parametrize(("value", "want"), [
    ("127.0.0.1:8443", ("127.0.0.1", 8443)),
    (":8443", ("0.0.0.0", 8443)),
    ("[::1]:9443", ("::1", 9443)),
])
def test_an_address_is_host_and_port(value: str, want: tuple[str, int]) -> None:
    assert cli._parse_bind(value) == want


@pytest.mark.parametrize("value", ["8443", "host:", "host:99999", "host:http"])
def test_a_malformed_address_is_refused(value: str) -> None:
    with pytest.raises(cli.UsageError, match="--bind"):
        cli._parse_bind(value)


def test_metrics_directories_of_killed_servers_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli.tempfile, "gettempdir", lambda: str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{cli.METRICS_DIR_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{cli.METRICS_DIR_PREFIX}{os.getpid()}-def"
    other = tmp_path / f"{cli.METRICS_DIR_PREFIX}nopid"
    for d in (stale, live, other):
        d.mkdir()
    cli._remove_stale_metrics_dirs()
    assert not stale.exists() and live.exists() and other.exists()
