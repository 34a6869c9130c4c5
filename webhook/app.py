"""The Flask adapter around :func:`webhook.admission.mutate`.

Routes:

- ``POST /mutate``: AdmissionReview v1 (``application/json``) in, AdmissionReview v1 out.
  ``POST /mutate-auto`` is the same for the namespace opt-in entry of the configuration
  (pods of namespaces labelled ``troupe.io/gang-mode: auto``).
  JSON is parsed once, with orjson (about twice as fast as the standard library here, see
  ``docs/decisions/002-webhook.md``); it refuses what is not strict JSON (NaN, invalid
  UTF-8, nesting deeper than 1024) with a 400.
  A body that is not JSON, not an AdmissionReview v1 or lacks ``request.uid`` gets HTTP 400;
  the wrong content type 415; a body over :data:`MAX_BODY_BYTES`, or with more than
  :data:`MAX_JSON_CONTAINERS` objects and arrays, 413 (what parsing it would cost is
  bounded before it is parsed: decision 028). Anything else gets
  HTTP 200 with the decision inside, including a bug (a denial with code 500), so the
  apiserver never sees a 5xx or a stack trace. One JSON log line per review.
- ``GET /healthz``: the process answers.
- ``GET /readyz``: configuration loaded and the serving certificate readable (503
  ``waiting for certificate files X and Y`` while they do not exist yet).
- ``GET /metrics``: Prometheus text exposition (see :mod:`webhook.metrics`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from troupe.config import Config
from webhook import metrics
from webhook.admission import envelope_error, mutate, outcome_of
from webhook.logs import ADMISSION_LOGGER, AdmissionLog, LoggingAdmissionLog
from webhook.registration import MUTATE_AUTO_PATH, MUTATE_PATH
from webhook.tls import CertReloader, reloader_for

#: Largest request body accepted, bytes. etcd stores an object of at most 1.5 MiB (its
#: default ``--max-request-bytes``), kube-apiserver reads request bodies of at most 3 MiB,
#: and the review of an UPDATE carries two objects: 4 MiB holds any two stored pods in JSON
#: (decision 028; it was 8 MiB, whose parse could cost 235 MiB).
MAX_BODY_BYTES = 4 * 1024 * 1024
#: Most JSON objects and arrays a body may hold, counted as its ``{`` and ``[`` bytes
#: (inside strings too) before parsing: each costs 56 to 64 bytes parsed, so a body of
#: nothing but ``{},`` costs 29 times its size. 200,000 is above what 4 MiB of a real
#: pod's JSON holds (an env entry ``{"name":"A","value":"1"}`` is 24 bytes) and bounds
#: their part of a parse to about 17 MiB (decision 028).
MAX_JSON_CONTAINERS = 200_000

log = logging.getLogger(ADMISSION_LOGGER)
_JSON = "application/json"


def _json_response(body: Mapping[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype=_JSON)


def _bad_request(status: int, message: str) -> Response:
    return _json_response(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status, "message": message},
        status,
    )


def _too_many_json_containers(body: bytes) -> str | None:
    """Why ``body`` would cost too much to parse, or None: more than
    :data:`MAX_JSON_CONTAINERS` ``{`` and ``[`` bytes (decision 028). A body no longer than
    the bound cannot hold more, and is not scanned (a scan costs about 1.5 µs per KiB)."""
    if len(body) <= MAX_JSON_CONTAINERS:
        return None
    nested = body.count(b"{") + body.count(b"[")
    if nested <= MAX_JSON_CONTAINERS:
        return None
    return f"request body holds {nested} JSON objects and arrays, more than {MAX_JSON_CONTAINERS}"


def _summary(review: object) -> dict[str, Any]:
    """uid, namespace, name, operation, dry_run and user of a review, for the log line."""
    req = review.get("request") if isinstance(review, Mapping) else None
    if not isinstance(req, Mapping):
        return {}
    obj = req.get("object")
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    user = req.get("userInfo")
    return {
        "uid": req.get("uid"),
        "namespace": req.get("namespace") or meta.get("namespace"),
        "name": req.get("name") or meta.get("name") or meta.get("generateName"),
        "operation": req.get("operation"),
        "dry_run": bool(req.get("dryRun")),
        "user": user.get("username") if isinstance(user, Mapping) else None,
    }


def _finish(admission_log: AdmissionLog, start: float, summary: dict[str, Any], outcome: str, body: Response,
            **fields: Any) -> Response:
    """Count a review begun at ``start`` (``time.perf_counter``) in the metrics, write its
    log line (``summary``, ``outcome``, the duration, ``fields``), and return ``body``."""
    seconds = time.perf_counter() - start
    operation = metrics.operation_label(summary.get("operation"))
    metrics.record(operation, outcome, seconds)
    admission_log.write({**summary, "operation": operation, "outcome": outcome,
                         "duration_ms": round(seconds * 1000, 3), **fields})
    return body


def _answer(review: dict[str, Any], config: Config, gang_mode_auto: bool,
            summary: Mapping[str, Any]) -> tuple[str, Response, dict[str, Any]]:
    """Answer a review whose envelope is valid: its outcome (:func:`outcome_of`), the HTTP
    response, and the fields its log line adds (a denial's ``message``, the ``warnings``).
    A failure of the adapter itself becomes an ``InternalError`` denial (logged)."""
    try:
        answer = mutate(review, config, gang_mode_auto=gang_mode_auto)
        outcome = outcome_of(answer)
        body = _json_response(answer)
    except Exception:  # mutate never raises; this guards the adapter itself
        log.exception("admission failed", extra={"fields": summary})
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": review["request"]["uid"], "allowed": False,
            "status": {"status": "Failure", "code": 500, "reason": "InternalError",
                       "message": "internal error in Troupe's webhook; see its logs"}}}
        outcome, body = "error", _json_response(answer)
    resp = answer["response"]
    extra: dict[str, Any] = {}
    if not resp.get("allowed"):
        extra["message"] = resp.get("status", {}).get("message")
    if resp.get("warnings"):
        extra["warnings"] = resp["warnings"]
    return outcome, body, extra


def _readiness(configured: bool, reloader: CertReloader | None) -> Response:
    """``/readyz``: 503 without a configuration or while the serving pair cannot be loaded
    (the reloader's note), else 200 ``ok`` (with the reloader's note, if any)."""
    if not configured:
        return Response("configuration not loaded\n", status=503, mimetype="text/plain")
    if reloader is not None:
        ok, note = reloader.ready()
        if not ok:
            return Response(note + "\n", status=503, mimetype="text/plain")
        if note:
            return Response(f"ok ({note})\n", mimetype="text/plain")
    return Response("ok\n", mimetype="text/plain")


def create_app(config: Config, cert_file: str | None = None, key_file: str | None = None,
               admission_log: AdmissionLog | None = None) -> Flask:
    """The webhook's Flask app for ``config``.

    ``cert_file``/``key_file`` are the serving pair; ``/readyz`` checks them (without them,
    as under a test client, readiness depends on the configuration only). One line per
    review goes to ``admission_log`` (default: the ``troupe.webhook.admission`` logger;
    served, :class:`webhook.logs.FdAdmissionLog` on stderr).
    """
    admission_log = admission_log or LoggingAdmissionLog()
    app = Flask("troupe_webhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["TROUPE_CONFIG"] = config
    reloader = reloader_for(cert_file, key_file) if cert_file and key_file else None

    finish = functools.partial(_finish, admission_log)

    @app.post(MUTATE_PATH)
    @app.post(MUTATE_AUTO_PATH)
    def mutate_view() -> Response:
        start = time.perf_counter()
        content_type = request.environ.get("CONTENT_TYPE", "")
        if content_type.partition(";")[0].strip().lower() != _JSON:
            return finish(start, {}, "error", _bad_request(415, f"Content-Type must be {_JSON}"), status=415)
        try:
            data = request.get_data(cache=False)
            if (too_many := _too_many_json_containers(data)) is not None:
                return finish(start, {}, "error", _bad_request(413, too_many), status=413, message=too_many)
            review = orjson.loads(data)
        except HTTPException as e:  # 413: body too large
            code = e.code or 400
            return finish(start, {}, "error", _bad_request(code, e.description or e.name), status=code)
        except ValueError as e:  # orjson.JSONDecodeError: not JSON, not UTF-8, nested too deep
            return finish(start, {}, "error", _bad_request(400, f"body is not JSON: {type(e).__name__}"), status=400)
        summary = _summary(review)
        problem = envelope_error(review)
        if problem is not None:
            return finish(start, summary, "error", _bad_request(400, problem), status=400, message=problem)
        outcome, body, extra = _answer(review, config, request.path == MUTATE_AUTO_PATH, summary)
        return finish(start, summary, outcome, body, **extra)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        return _readiness(app.config.get("TROUPE_CONFIG") is not None, reloader)

    @app.get("/metrics")
    def metrics_view() -> Response:
        data, content_type = metrics.exposition()
        return Response(data, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> Response:
        code = e.code or 400
        return _bad_request(code, e.description or e.name)

    return app
