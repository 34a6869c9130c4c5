"""The Flask adapter (``webhook.app``) in-process: HTTP answers for good and bad requests,
one JSON log line per review, metrics, health and readiness."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.support.webhook_builders import make_pod, make_review, make_tls
from troupe.config import Config
from webhook import app as app_module
from webhook.admission import patch_of
from webhook.app import MAX_BODY_BYTES, MAX_JSON_CONTAINERS, create_app


@pytest.fixture
def client() -> FlaskClient:
    return create_app(Config()).test_client()


def post(client: FlaskClient, body: Any, content_type: str = "application/json") -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/mutate", data=data, content_type=content_type)


def count(client: FlaskClient, operation: str, outcome: str) -> float:
    text = client.get("/metrics").get_data(as_text=True)
    want = f'troupe_webhook_admissions_total{{operation="{operation}",outcome="{outcome}"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(want))


def test_a_review_gets_an_admission_review_with_the_uid_and_the_patch(client: FlaskClient) -> None:
    r = post(client, make_review(make_pod().gang().container().obj(), uid="u-42"))
    assert r.status_code == 200 and r.mimetype == "application/json"
    body = r.get_json()
    assert body["response"]["uid"] == "u-42" and body["response"]["allowed"] is True
    assert [op["path"] for op in patch_of(body)] == [
        "/spec/schedulingGates", "/spec/tolerations", "/metadata/annotations/troupe.io~1gang-schedule-timeout-seconds"]


def test_a_charset_parameter_on_the_content_type_is_accepted(client: FlaskClient) -> None:
    r = post(client, make_review(make_pod().obj()), content_type="application/json; charset=utf-8")
    assert r.status_code == 200


@pytest.mark.parametrize(("name", "body", "content_type", "want_status", "want_in_message"), [
    ("a form post", b"a=b", "application/x-www-form-urlencoded", 415, "Content-Type"),
    ("no content type", b"{}", "", 415, "Content-Type"),
    ("text that is not JSON", b"hello", "application/json", 400, "not JSON"),
    ("bytes that are not UTF-8", b"\xff\xfe\xfa", "application/json", 400, "not JSON"),
    ("nesting deeper than the parser allows", b"[" * 200_000 + b"]" * 200_000, "application/json", 400,
     "not JSON"),
    ("JSON that is not a review", b"[1, 2]", "application/json", 400, "AdmissionReview"),
    ("a review without a uid", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                           "request": {}}).encode(), "application/json", 400, "request.uid"),
    ("a body over the limit", b" " * (MAX_BODY_BYTES + 1), "application/json", 413, ""),
    ("more JSON objects than are parsed", b"[" + b",".join([b"{}"] * (MAX_JSON_CONTAINERS + 1)) + b"]",
     "application/json", 413, f"{MAX_JSON_CONTAINERS + 2} JSON objects and arrays, more than {MAX_JSON_CONTAINERS}"),
])
def test_a_malformed_request_gets_a_4xx_with_a_reason_never_a_5xx(
    client: FlaskClient, name: str, body: bytes, content_type: str, want_status: int, want_in_message: str
) -> None:
    r = post(client, body, content_type=content_type)
    assert r.status_code == want_status
    payload = r.get_json()
    assert payload["code"] == want_status and want_in_message in payload["message"]
    assert "Traceback" not in r.get_data(as_text=True)


def test_other_methods_and_paths_get_4xx(client: FlaskClient) -> None:
    assert client.get("/mutate").status_code == 405
    assert client.post("/validate", data=b"{}", content_type="application/json").status_code == 404


def test_a_bug_behind_mutate_is_a_denial_with_status_200(client: FlaskClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(review: Any, config: Config) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(app_module, "mutate", boom)
    before = count(client, "CREATE", "error")
    r = post(client, make_review(make_pod().gang().obj(), uid="u-bug"))
    assert r.status_code == 200
    resp = r.get_json()["response"]
    assert resp["uid"] == "u-bug" and resp["allowed"] is False and resp["status"]["code"] == 500
    assert count(client, "CREATE", "error") == before + 1


def test_each_review_is_counted_by_operation_and_outcome(client: FlaskClient) -> None:
    outcomes = {"patched": make_pod().gang().obj(), "allowed": make_pod().obj(),
                "denied": make_pod().gang(size="0").obj()}
    before = {o: count(client, "CREATE", o) for o in outcomes}
    for pod in outcomes.values():
        post(client, make_review(pod))
    assert {o: count(client, "CREATE", o) - before[o] for o in outcomes} == dict.fromkeys(outcomes, 1)
    text = client.get("/metrics").get_data(as_text=True)
    assert 'troupe_webhook_admission_duration_seconds_bucket{le="0.01",operation="CREATE"}' in text


def test_one_json_ready_log_line_per_review(client: FlaskClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="troupe.webhook.admission")
    post(client, make_review(make_pod("w-3", "team").gang(size="0").obj(), uid="u-log"))
    [record] = [r for r in caplog.records if r.name == "troupe.webhook.admission"]
    fields = record.fields  # type: ignore[attr-defined]
    assert {k: fields[k] for k in ("uid", "namespace", "name", "operation", "outcome", "dry_run")} == {
        "uid": "u-log", "namespace": "team", "name": "w-3", "operation": "CREATE", "outcome": "denied",
        "dry_run": False}
    assert fields["duration_ms"] >= 0 and "troupe.io/gang-size" in fields["message"]
    from webhook.logs import JSONFormatter

    line = json.loads(JSONFormatter().format(record))
    assert line["uid"] == "u-log" and line["msg"] == "admission" and line["level"] == "info"


def test_health_and_readiness_answer(client: FlaskClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200


def test_readiness_needs_a_readable_certificate(tmp_path: Path) -> None:
    tls = make_tls(tmp_path)
    client = create_app(Config(), str(tls.cert), str(tls.key)).test_client()
    assert client.get("/readyz").status_code == 200
    tls.cert.unlink()
    r = client.get("/readyz")
    assert r.status_code == 503 and "certificate" in r.get_data(as_text=True)


def test_workers_follow_a_cgroup_cpu_quota_not_the_nodes_cpus(tmp_path):
    import os

    from webhook.gunicorn_conf import _cpus

    mask = len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    quota.write_text("max 100000\n")
    assert _cpus(str(quota)) == mask
    quota.write_text("150000 100000\n")
    assert _cpus(str(quota)) == min(mask, 2), "1.5 CPUs round up to 2"
    quota.write_text("50000 100000\n")
    assert _cpus(str(quota)) == 1
    assert _cpus(str(tmp_path / "missing")) == mask

