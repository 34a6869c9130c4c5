"""Ctrl-C stops a reconciler replica on the live cluster however it was started: also with
SIGINT ignored, as a non-interactive shell starts ``python -m reconciler run ... &``
(docs/decisions/067-narrowed-tokens-interrupts-and-finished-workloads.md). The replica
stands by behind the session's leader, so stopping it changes nothing for the other tests.
``kubectl troupe status -w`` and ``topology --web`` are shown stopping the same way on
snapshots (tests/plugin), the webhook under gunicorn in tests/webhook/test_serve_https.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from devtools.devcluster.cluster import free_port
from devtools.devcluster.stack import NAMESPACE, readyz
from tests.support.e2e import wait_for
from tests.support.signals import sigint_ignored

REPO = Path(__file__).resolve().parents[2]


def test_a_replica_started_with_sigint_ignored_stops_on_ctrl_c_and_leaves_the_leader_leading(troupe, tmp_path):
    port = free_port()
    argv = [sys.executable, "-m", "reconciler", "run", "--kubeconfig", str(troupe.cluster.kubeconfig("reconciler")),
            "--config", str(troupe.config_path), "--metrics-bind", f"127.0.0.1:{port}",
            "--leader-elect", "--leader-elect-namespace", NAMESPACE,
            "--leader-elect-lease-seconds", str(troupe.lease_seconds),
            "--reservation-key-file", str(troupe.reservation_key)]
    log = tmp_path / "replica.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(sigint_ignored(argv), stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        wait_for("the replica standing by", lambda: (readyz(port) or {}).get("role") == "standby", timeout=60)
        with open(f"/proc/{proc.pid}/status") as status:
            ignored = int(next(line for line in status if line.startswith("SigIgn:")).split()[1], 16)
        assert not ignored & (1 << (signal.SIGINT - 1)), "SIGINT is taken back from the ignored disposition"

        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, log.read_text()[-2000:]
    assert "received SIGINT: stopping" in log.read_text()
    assert (readyz(troupe.metrics_port) or {}).get("role") == "leader", "the session's leader still leads"
