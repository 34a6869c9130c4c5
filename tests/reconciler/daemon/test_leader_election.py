"""Lease durations for ``reconciler run --leader-elect``."""

import subprocess
import sys

import pytest

from reconciler.daemon.election import LeaderElection


@pytest.mark.parametrize(("lease", "want"), [(15, (15, 10, 2)), (60, (60, 40, 2)), (6, (6, 4, 1)), (4, (4, 2, 1))])
def test_renewal_and_retry_scale_with_the_lease_as_kube_controller_manager_defaults_do(lease, want):
    e = LeaderElection.scaled("ns", "troupe", lease)
    assert (e.lease_seconds, e.renew_seconds, e.retry_seconds) == want
    assert e.lease_seconds > e.renew_seconds > 1.2 * e.retry_seconds, "what the client's election config demands"


def test_a_lease_too_short_to_renew_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--leader-elect-lease-seconds: must be at least 4, got 3"):
        LeaderElection.scaled("ns", "troupe", 3)
    done = subprocess.run([sys.executable, "-m", "reconciler", "run", "--kubeconfig", "/nonexistent",
                           "--leader-elect", "--leader-elect-lease-seconds", "2"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "reconciler: --leader-elect-lease-seconds: must be at least 4, got 2"
