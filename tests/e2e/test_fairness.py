"""One tenant's flood of gangs that cannot run does not make another tenant's gang wait.

500 one-pod gangs that fit nowhere (9 GPUs on 8-GPU nodes) are created in one namespace
while, in another, a gang of 2 that fits arrives: it is released within 2 seconds of its
last member's creation, however many of the flood's gangs are still queued.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tests.support.e2e import gang_annotations, new_namespace, pod_body, wait_for

FLOOD = 500


def test_a_fitting_gang_is_released_within_2s_behind_500_unschedulable_gangs_of_another_namespace(troupe, admin_core):
    flood_ns, quiet_ns = new_namespace(admin_core, "flood"), new_namespace(admin_core, "quiet")
    try:
        def one(i: int) -> None:
            admin_core.create_namespaced_pod(flood_ns, pod_body(f"x-{i}", gang_annotations(f"x-{i}", 1), gpus=9))

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(one, i) for i in range(FLOOD)]
            # Halfway through the flood, the quiet namespace's gang arrives.
            while sum(f.done() for f in futures) < FLOOD // 2:
                time.sleep(0.05)
            for i in range(2):
                admin_core.create_namespaced_pod(quiet_ns, pod_body(f"w-{i}", gang_annotations("fits", 2), gpus=1))
            arrived = time.monotonic()

            def released():
                pods = admin_core.list_namespaced_pod(quiet_ns).items
                return len(pods) == 2 and not any(p.spec.scheduling_gates for p in pods)

            wait_for("the quiet gang released", released, timeout=30, interval=0.05)
            took = time.monotonic() - arrived
            for f in futures:
                f.result()
        flood = admin_core.list_namespaced_pod(flood_ns).items
        print(f"quiet gang released {took:.2f}s after its last member, during a flood of {FLOOD} "
              f"unschedulable one-pod gangs ({sum(1 for p in flood if p.spec.scheduling_gates)} gated)")
        assert took < 2.0
        assert all(p.spec.scheduling_gates for p in flood), "none of the flood was released"
    finally:
        for name in (flood_ns, quiet_ns):
            admin_core.delete_namespace(name, grace_period_seconds=0)
        wait_for("namespaces gone", lambda: not {flood_ns, quiet_ns} & {
            n.metadata.name for n in admin_core.list_namespace().items}, timeout=120)
