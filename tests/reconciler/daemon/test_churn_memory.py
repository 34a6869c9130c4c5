"""Pods a tenant creates and deletes leave in the reconciler no more than a stated bound,
whatever their specs (docs/decisions/063-memos-held-by-their-users.md).

A tenant with room for one pod creates and deletes pods one after another, each of a
distinct spec just under the spec memo's 8 KiB (about 420 short tolerations), with its
own labels, gang name and owner, fed to the reconciler's cache by the informers' path.
Once they are gone the cache holds no pod, and what the process still holds
(tracemalloc, after a garbage collection) is what its memos and tombstones keep, within
:func:`testbed.hostile_tenants.churn_bound`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from reconciler.daemon.cache import ClusterCache
from testbed.hostile_tenants import churn_bound, churn_pod
from troupe.config import Config

COUNT = 400


#: The churn measured in a process of its own: tracemalloc counts every thread's
#: allocations, and threads an earlier test module of the same worker left behind would be
#: counted as the cache's.
CHURN = f"""
import json
from reconciler.daemon.cache import ClusterCache
from reconciler.engine.model import specs
from testbed.hostile_tenants import churn_pod, kept_after_churn
from troupe.config import Config
cache = ClusterCache(Config())
pods = [churn_pod(n) for n in range({COUNT})]
before = specs.remembered()
kept = kept_after_churn(cache, pods)
print(json.dumps({{"kept": kept, "refs": len(cache.pod_refs()), "before": before, "after": specs.remembered()}}))
"""


def test_pods_of_distinct_large_specs_created_and_deleted_leave_no_more_than_the_bound():
    done = subprocess.run([sys.executable, "-c", CHURN], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[3], check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert result["refs"] == 0
    assert result["after"] <= result["before"], "no parse outlives its pods"
    kept = result["kept"]
    assert kept < churn_bound(COUNT), f"{kept / 2**20:.1f} MiB kept after {COUNT} pods were deleted"


def test_pods_of_one_template_share_one_parse_while_they_exist():
    cache = ClusterCache(Config())
    for i in range(3):
        cache.pod_event("ADDED", cache.retain_pod({**churn_pod(0), "metadata": {
            **churn_pod(0)["metadata"], "name": f"twin-{i}", "uid": f"uid-twin-{i}"}}))
    first, *others = (cache.pod_info(ref) for ref in cache.pod_refs())
    assert first is not None and first.spec_values is not None
    assert all(o is not None and o.spec_values is first.spec_values for o in others)
