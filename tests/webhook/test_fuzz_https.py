"""Fuzz the served webhook over HTTPS with 10,000 malformed AdmissionReviews: mutated
reviews (keys dropped, values of the wrong type, deep nesting), truncated and bit-flipped
JSON, random bytes, wrong content types and oversized bodies. No answer may be a 5xx, every
request must get an answer, and every 200 must be an AdmissionReview echoing the uid.

Deterministic (a seeded generator), four keep-alive connections, about 10 s.
"""

from __future__ import annotations

import copy
import json
import random
import threading
import time
from collections import Counter
from typing import Any

import pytest

from tests.support.webhook_builders import RECONCILER, Server, make_pod, make_review
from webhook.app import MAX_BODY_BYTES

REQUESTS = 10_000
CONNECTIONS = 4
SEED = 20260321

BASES = [
    make_review(make_pod().gang("g", "8", timeout="60").container("a").container("b").obj()),
    make_review(make_pod().annotate("deviceshare.io/group", "team-a").init_container().container(
        env=[{"name": "X", "value": "1"}]).obj()),
    make_review(make_pod().annotate("troupe.io/topology-required-level", "cloud.google.com/gce-topology-host")
                .gate("gke.io/topology-aware-auto-j").container().obj()),
    make_review(make_pod().gang().annotate("reconciler.troupe.io/node", "n1").obj(), operation="UPDATE",
                old=make_pod().gang().obj()),
    make_review(make_pod().annotate("reconciler.troupe.io/node", "n1").obj(), user=RECONCILER),
    make_review(make_pod().container().obj()),
]


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**63, -(2**70), rng.randrange(-1000, 1000)])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e-300, float(rng.randrange(100))])
    if kind in (4, 5):
        return rng.choice(["", "0", "-1", "abc", "troupe.io/placement", "\u0000", "\udc80"[:0] + "é" * 3,
                           "x" * rng.randrange(0, 300), "CREATE", "UPDATE", "pods"])
    if kind in (6, 7):
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["name", "uid", "metadata", "spec", "annotations", "env", "", "é"]):
            _random_json(rng, depth + 1) for _ in range(rng.randrange(4))}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _mutate_json(rng: random.Random, review: dict[str, Any]) -> Any:
    doc: Any = copy.deepcopy(review)
    for _ in range(rng.randrange(1, 4)):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            return _random_json(rng)
        path = rng.choice(paths)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        action = rng.randrange(4)
        if action == 0 and isinstance(parent, dict):
            del parent[last]
        elif action == 0 and isinstance(parent, list):
            parent.pop(last)
        elif action == 1:
            parent[last] = _random_json(rng)
        elif action == 2:
            nested: Any = "leaf"
            for _ in range(rng.choice([10, 100, 300])):
                nested = [nested] if rng.random() < 0.5 else {"a": nested}
            parent[last] = nested
            break  # deep enough: mutating inside it again could exceed json's recursion limit
        else:
            parent[last] = [parent[last]]
    return doc


Case = tuple[bytes, str, "str | None", bool]


def make_case(rng: random.Random, i: int) -> Case:
    """(body, content type, expected uid in a 200 answer or None, body over the limit)."""
    base = rng.choice(BASES)
    kind = rng.randrange(100)
    ct = "application/json"
    if kind < 45:
        doc = _mutate_json(rng, base)
        if isinstance(doc, dict) and isinstance(doc.get("request"), dict):
            doc["request"]["uid"] = doc["request"].get("uid", f"fuzz-{i}")
        body = json.dumps(doc).encode()
    elif kind < 55:
        body = json.dumps(_random_json(rng)).encode()
    elif kind < 65:
        raw = json.dumps(base).encode()
        body = raw[: rng.randrange(len(raw))]
    elif kind < 75:
        raw = bytearray(json.dumps(base).encode())
        for _ in range(rng.randrange(1, 8)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        body = bytes(raw)
    elif kind < 82:
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
    elif kind < 90:
        body = json.dumps(base).encode()
        ct = rng.choice(["text/plain", "application/x-www-form-urlencoded", "application/yaml",
                         "application/json-patch+json", "multipart/form-data; boundary=x", "", "*/*"])
    elif kind < 97:
        depth = rng.choice([1_000, 50_000, 200_000])
        body = (b"[" * depth) + (b"]" * depth) if rng.random() < 0.5 else (b'{"a":' * depth) + b"1" + b"}" * depth
    elif rng.random() < 0.03:
        body = b'{"apiVersion":"' + b"x" * (MAX_BODY_BYTES + 10) + b'"}'
        return body, ct, None, True
    else:
        doc = copy.deepcopy(base)
        doc["request"]["object"]["metadata"]["annotations"] = {"troupe.io/gang-name": "y" * 500_000}
        body = json.dumps(doc).encode()
    want_uid = None
    try:
        parsed = json.loads(body) if ct == "application/json" else None
        uid = parsed.get("request", {}).get("uid") if isinstance(parsed, dict) else None
        if isinstance(uid, str) and uid:
            want_uid = uid
    except (ValueError, RecursionError, AttributeError):
        pass
    return body, ct, want_uid, False


def test_ten_thousand_malformed_reviews_never_get_a_5xx(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(SEED)
    cases = [make_case(rng, i) for i in range(REQUESTS)]
    statuses: Counter[int] = Counter()
    problems: list[str] = []
    reconnects = [0]
    closed_over_limit = [0]
    lock = threading.Lock()

    def worker(chunk: list[Case]) -> None:
        conn = server.connection(timeout=30)
        for body, ct, want_uid, oversized in chunk:
            headers = {"Content-Type": ct} if ct else {}
            for attempt in (1, 2):
                try:
                    conn.request("POST", "/mutate", body=body, headers=headers)
                    r = conn.getresponse()
                    data = r.read()
                    break
                except (ConnectionError, OSError) as e:
                    conn.close()
                    conn = server.connection(timeout=30)
                    with lock:
                        reconnects[0] += 1
                    if oversized:
                        # The server answers 413 before reading such a body and then closes
                        # the connection; a client still sending may see the reset instead.
                        with lock:
                            closed_over_limit[0] += 1
                        data, r = b"", None
                        break
                    if attempt == 2:
                        with lock:
                            problems.append(f"no answer: {type(e).__name__}: {e}")
                        data, r = b"", None
            if r is None:
                continue
            with lock:
                statuses[r.status] += 1
            if r.status >= 500:
                with lock:
                    problems.append(f"{r.status}: {data[:200]!r} for {body[:120]!r}")
            elif r.status == 200:
                answer = json.loads(data)
                if answer.get("kind") != "AdmissionReview" or (
                        want_uid is not None and answer["response"]["uid"] != want_uid):
                    with lock:
                        problems.append(f"bad 200 answer {data[:200]!r}")
        conn.close()

    start = time.monotonic()
    threads = [threading.Thread(target=worker, args=(cases[i::CONNECTIONS],)) for i in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start

    with capsys.disabled():
        print(f"\nfuzz: {REQUESTS} malformed reviews over HTTPS in {elapsed:.1f}s, "
              f"statuses {dict(sorted(statuses.items()))}, bodies over the limit closed before the "
              f"answer was read {closed_over_limit[0]}, reconnects {reconnects[0]}")
    assert not problems, problems[:10]
    assert sum(statuses.values()) + closed_over_limit[0] == REQUESTS
    assert all(code < 500 for code in statuses)
    assert statuses[200] > 1000 and statuses[400] > 1000 and statuses[415] > 100
    assert statuses[413] + closed_over_limit[0] >= 1
    # Those closed connections were answered 413 all the same, as the server's log says.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        too_large = sum(1 for line in server.log_lines() if line.get("status") == 413)
        if too_large >= closed_over_limit[0] + statuses[413]:
            break
        time.sleep(0.1)
    assert too_large >= closed_over_limit[0] + statuses[413]
