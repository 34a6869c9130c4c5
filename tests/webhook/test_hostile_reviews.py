"""Hostile but well-formed reviews against the served webhook over HTTPS (``python -m webhook
serve``, 2 workers as the chart runs it): issue 22, finding 3, and
``docs/decisions/028-webhook-bounds-and-server.md``.

Before the bounds, three 0.9 MB reviews of a ``deviceshare.io/group`` pod whose containers
are ``{}`` (one env patch operation each, about 100 times the bytes), sent on connections
that never read, took the server from 82 to 903 MiB and a concurrent client's admissions to
3.4 s; a 5 MiB review and a pod of 101 containers were admitted.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support.hostile_webhook import (
    LATENCY_BOUND_S,
    POD_MEMORY_LIMIT_KIB,
    Watch,
    empty_containers_spec,
    review_bytes,
    send_never_read,
)
from tests.support.webhook_builders import Server, make_pod, make_review
from troupe.bounds import MAX_POD_TERMS
from webhook.admission import MAX_CONTAINERS
from webhook.app import MAX_BODY_BYTES


def _post(server: Server, body: bytes) -> tuple[int, dict[str, object]]:
    conn = server.connection(timeout=30)
    try:
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_three_amplifying_reviews_never_read_keep_memory_and_a_concurrent_client_within_bounds(
        server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    review = review_bytes({"deviceshare.io/group": "team-a"}, empty_containers_spec(300_000))
    assert 850_000 < len(review) < 950_000
    watch = Watch(server)
    hostile = [send_never_read(server, review) for _ in range(3)]
    try:
        time.sleep(8)
    finally:
        watch.stop()
        for sock in hostile:
            sock.close()
    with capsys.disabled():
        print(f"\namplification: {watch.summary()}")
    assert not watch.failures, watch.failures[:3]
    assert max(watch.latencies) < LATENCY_BOUND_S
    assert watch.peak_kib < POD_MEMORY_LIMIT_KIB, watch.summary()


def test_a_body_over_the_limit_is_refused_with_413_before_it_is_read(server: Server) -> None:
    """A review of 4.1 MiB (a pod with a large annotation: kube-apiserver reads bodies of
    at most 3 MiB, etcd stores objects of at most 1.5 MiB) is refused as soon as its head
    declares its length; it was admitted under the former 8 MiB limit."""
    pod = make_pod().annotate("example.com/blob", "x" * (MAX_BODY_BYTES + 100_000)).container().obj()
    body = json.dumps(make_review(pod)).encode()
    conn = server.connection(timeout=30)
    conn.putrequest("POST", "/mutate")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders()
    r = conn.getresponse()
    answer = json.loads(r.read())
    conn.close()
    assert r.status == 413
    assert str(MAX_BODY_BYTES) in str(answer["message"])


def test_a_pod_with_too_many_containers_is_denied_naming_the_fields_and_the_count(server: Server) -> None:
    builder = make_pod().annotate("deviceshare.io/group", "team-a")
    for i in range(MAX_CONTAINERS - 20):
        builder.container(f"c{i}")
    for i in range(21):
        builder.init_container(f"i{i}")
    status, answer = _post(server, json.dumps(make_review(builder.obj())).encode())
    response = answer["response"]
    assert status == 200 and isinstance(response, dict)
    assert response["allowed"] is False and response["status"]["code"] == 400
    message = response["status"]["message"]
    assert f"= {MAX_CONTAINERS + 1} (spec.containers: {MAX_CONTAINERS - 20}, spec.initContainers: 21)" in message
    assert f"at most {MAX_CONTAINERS} containers" in message


def test_a_pod_with_too_many_pod_affinity_terms_is_denied_naming_the_field_and_the_count(server: Server) -> None:
    """Over HTTPS with a real AdmissionReview: 13,000 required pod affinity terms (what fits
    in the body limit) would cost every gang's decision (docs/decisions/049)."""
    pod = make_pod().annotate("troupe.io/gang-name", "g").annotate("troupe.io/gang-size", "2").container().obj()
    pod["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"k": f"v{i}"}}}
        for i in range(13_000)]}}
    status, answer = _post(server, json.dumps(make_review(pod)).encode())
    response = answer["response"]
    assert status == 200 and response["allowed"] is False and response["status"]["code"] == 400
    message = response["status"]["message"]
    assert "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution: 13000 entries" in message
    assert f"at most {MAX_POD_TERMS} required pod affinity terms" in message
