"""Property: hostile but well-formed reviews (many empty containers in any container list,
deep JSON nesting, huge strings, many env entries), sent on connections that never read,
keep the served webhook's memory under the chart's limit and a concurrent client's
admissions under a bound (``docs/decisions/028-webhook-bounds-and-server.md``); every such
review read back gets an answer that is not a 5xx, and no answer is large.
"""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hostile_webhook import (
    LATENCY_BOUND_S,
    POD_MEMORY_LIMIT_KIB,
    Watch,
    empty_containers_spec,
    review_bytes,
    send_never_read,
)
from tests.support.webhook_builders import Server

MAX_ANSWER_BYTES = 256 * 1024

_LISTS = st.sampled_from(["containers", "initContainers", "ephemeralContainers"])
_ANNOTATIONS = st.sampled_from([{"deviceshare.io/group": "team-a"}, {"troupe.io/gang-name": "g",
                                "troupe.io/gang-size": "4"}, {}])


@st.composite
def hostile_spec(draw: st.DrawFn) -> bytes:
    """The raw JSON of a hostile pod spec."""
    kind = draw(st.sampled_from(["empty", "deep", "string", "env"]))
    if kind == "empty":
        return empty_containers_spec(draw(st.integers(0, 400_000)), draw(_LISTS))
    if kind == "deep":
        depth = draw(st.integers(1, 5_000))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        return b'{"containers":[{}],"x":' + opener * depth + b"1" + closer * depth + b"}"
    if kind == "string":
        size = draw(st.integers(0, 4_500_000))
        return b'{"containers":[{"name":"' + b"n" * size + b'"}]}'
    entries = draw(st.integers(0, 40_000))
    env = b",".join([b'{"name":"A","value":"1"}'] * entries)
    return b'{"containers":[{"name":"c","env":[' + env + b"]}]}"


def _answer(server: Server, body: bytes) -> tuple[int, int]:
    """(status, answer bytes) of ``body``; (413, 0) when the server refused it before it
    was all sent and closed the connection."""
    conn = server.connection(timeout=30)
    try:
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, len(r.read())
    except (ConnectionError, OSError):
        return 413, 0
    finally:
        conn.close()


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(specs=st.lists(hostile_spec(), min_size=1, max_size=3), annotations=_ANNOTATIONS)
def test_hostile_reviews_keep_memory_and_a_concurrent_client_bounded(
        server: Server, specs: list[bytes], annotations: dict[str, str]) -> None:
    bodies = [review_bytes(annotations, spec, uid=f"hostile-{i}") for i, spec in enumerate(specs)]
    watch = Watch(server)
    hostile = [send_never_read(server, body) for body in bodies]
    try:
        answers = [_answer(server, body) for body in bodies]
        time.sleep(0.5)
    finally:
        watch.stop()
        for sock in hostile:
            sock.close()
    assert all(status < 500 for status, _ in answers), answers
    assert all(size <= MAX_ANSWER_BYTES for _, size in answers), answers
    assert not watch.failures, watch.failures[:3]
    assert max(watch.latencies, default=0.0) < LATENCY_BOUND_S, watch.summary()
    assert watch.peak_kib < POD_MEMORY_LIMIT_KIB, watch.summary()
