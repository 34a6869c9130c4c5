"""Builders and server helpers for the webhook tests.

Pods are built with a chained builder (``make_pod("w-0").gang("g", 4).container("main")``),
reviews with :func:`make_review`; :func:`admit` runs ``mutate`` and applies its patch with
``jsonpatch``, so every test checks that the patch really applies.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch

from certs import KeyPair, create_ca, create_serving_cert
from devtools.devcluster.cluster import free_ports
from tests.support.signals import started
from troupe.config import Config
from webhook.admission import mutate, patch_of

REPO = Path(__file__).resolve().parents[2]
ALICE = "alice@example.com"
RECONCILER = Config().reconciler_username


class PodBuilder:
    """A pod as the apiserver hands it to admission, built step by step."""

    def __init__(self, name: str = "w-0", namespace: str = "ml") -> None:
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": []},
        }

    def annotate(self, key: str, value: Any) -> PodBuilder:
        self._pod["metadata"].setdefault("annotations", {})[key] = value
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"].setdefault("labels", {})[key] = value
        return self

    def gang(self, name: Any = "g", size: Any = "4", timeout: Any = None,
             prefix: str = "troupe.io/gang") -> PodBuilder:
        self.annotate(f"{prefix}-name", name)
        if size is not None:
            self.annotate(f"{prefix}-size", size)
        if timeout is not None:
            self.annotate(f"{prefix}-schedule-timeout-seconds", timeout)
        return self

    def container(self, name: str = "main", env: list[dict[str, Any]] | None = None,
                  resources: dict[str, Any] | None = None) -> PodBuilder:
        c: dict[str, Any] = {"name": name, "image": "registry.example.com/train:1"}
        if env is not None:
            c["env"] = env
        if resources is not None:
            c["resources"] = resources
        self._pod["spec"]["containers"].append(c)
        return self

    def init_container(self, name: str = "init", env: list[dict[str, Any]] | None = None,
                       resources: dict[str, Any] | None = None) -> PodBuilder:
        c: dict[str, Any] = {"name": name, "image": "registry.example.com/init:1"}
        if env is not None:
            c["env"] = env
        if resources is not None:
            c["resources"] = resources
        self._pod["spec"].setdefault("initContainers", []).append(c)
        return self

    def pod_resources(self, resources: dict[str, Any]) -> PodBuilder:
        """Pod-level ``spec.resources`` (KEP-2837)."""
        self._pod["spec"]["resources"] = resources
        return self

    def toleration(self, **fields: Any) -> PodBuilder:
        self._pod["spec"].setdefault("tolerations", []).append(fields)
        return self

    def gate(self, name: str) -> PodBuilder:
        self._pod["spec"].setdefault("schedulingGates", []).append({"name": name})
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


def make_pod(name: str = "w-0", namespace: str = "ml") -> PodBuilder:
    """A pod builder (``.gang(...)``, ``.annotate(...)``, ``.container(...)``, ``.obj()``)."""
    return PodBuilder(name, namespace)


def gated_member(size: str = "2", **annotations: str) -> dict[str, Any]:
    """A gang member of ``g`` (``size`` members, 30 s timeout) as the reconciler sees it
    after admission: gated by Troupe, with ``annotations`` added."""
    b = make_pod().gang("g", size, timeout="30").gate("troupe.io/placement").container()
    for k, v in annotations.items():
        b.annotate(k, v)
    return b.obj()


def with_annotations(pod: dict[str, Any], **changes: str | None) -> dict[str, Any]:
    """A copy of ``pod`` with annotations set (a value) or removed (None)."""
    out = {**pod, "metadata": {**pod["metadata"], "annotations": dict(pod["metadata"].get("annotations", {}))}}
    for k, v in changes.items():
        if v is None:
            out["metadata"]["annotations"].pop(k, None)
        else:
            out["metadata"]["annotations"][k] = v
    return out


def make_review(pod: Any, operation: str = "CREATE", user: str = ALICE, old: Any = None,
                dry_run: bool = False, uid: str = "uid-1", namespace: str | None = None,
                groups: list[str] | None = None, sub_resource: str | None = None) -> dict[str, Any]:
    """An AdmissionReview v1 request as kube-apiserver sends it for a pod (``sub_resource``
    ``"status"``: for ``pods/status``)."""
    meta = pod.get("metadata", {}) if isinstance(pod, dict) else {}
    meta = meta if isinstance(meta, dict) else {}
    review: dict[str, Any] = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace if namespace is not None else meta.get("namespace", "ml"),
            "name": meta.get("name", ""),
            "operation": operation,
            "userInfo": {"username": user, "groups": groups if groups is not None else ["system:authenticated"]},
            "object": pod,
            "oldObject": old,
            "dryRun": dry_run,
        },
    }
    if sub_resource:
        review["request"]["subResource"] = sub_resource
    return review


@dataclass
class Admitted:
    """What one admission did: the raw response, the patched pod, the patch."""

    response: dict[str, Any]
    pod: Any
    ops: list[dict[str, Any]] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return bool(self.response["allowed"])

    @property
    def message(self) -> str:
        return str(self.response.get("status", {}).get("message", ""))

    @property
    def code(self) -> int | None:
        return self.response.get("status", {}).get("code")

    @property
    def warnings(self) -> list[str]:
        return list(self.response.get("warnings", []))


def admit(pod: Any, config: Config | None = None, **review_kwargs: Any) -> Admitted:
    """Run ``mutate`` on a review of ``pod`` and apply the returned patch to a copy of it."""
    review = make_review(pod, **review_kwargs)
    out = mutate(review, config or Config())
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == review["request"]["uid"]
    ops = patch_of(out)
    patched = jsonpatch.apply_patch(pod, ops) if ops else copy.deepcopy(pod)
    return Admitted(out["response"], patched, ops)


# --- Real servers ------------------------------------------------------------------------

def free_port() -> int:
    """A free TCP port on 127.0.0.1 (:func:`devtools.devcluster.cluster.free_port`)."""
    return free_ports(1)[0]


@dataclass
class TLSFiles:
    """A CA and a serving pair for 127.0.0.1, written in ``dir``."""

    dir: Path
    ca: KeyPair
    cert: Path
    key: Path
    ca_file: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def rotate(self) -> KeyPair:
        """Write a new serving pair (same CA) the way a Secret update does: new files
        moved into place, key first."""
        pair = create_serving_cert(self.ca, ["127.0.0.1", "localhost"])
        for path, data in ((self.key, pair.key_pem), (self.cert, pair.cert_pem)):
            tmp = path.with_suffix(".new")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return pair


def make_tls(directory: Path) -> TLSFiles:
    ca = create_ca()
    pair = create_serving_cert(ca, ["127.0.0.1", "localhost"])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)
    return TLSFiles(directory, ca, directory / "tls.crt", directory / "tls.key", directory / "ca.crt")


@dataclass
class Server:
    """A ``python -m webhook serve`` subprocess on 127.0.0.1, stopped by its pid."""

    proc: subprocess.Popen[bytes]
    port: int
    tls: TLSFiles
    log_path: Path

    def connection(self, timeout: float = 10.0) -> Any:
        import http.client

        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls.client_context(),
                                           timeout=timeout)

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.startswith("{")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def start_server(tmp: Path, extra_args: list[str] | None = None, config_yaml: str | None = None,
                 sigint_ignored: bool = False) -> Server:
    """Start the webhook under gunicorn and wait until ``/healthz`` answers; with
    ``sigint_ignored``, as a non-interactive shell starts it with ``&`` (SIGINT ignored)."""
    tls = make_tls(tmp / "tls")
    port = free_port()
    args = [sys.executable, "-m", "webhook", "serve", "--tls-cert", str(tls.cert), "--tls-key", str(tls.key),
            "--bind", f"127.0.0.1:{port}", "--workers", "2", *(extra_args or [])]
    if config_yaml is not None:
        (tmp / "troupe.yaml").write_text(config_yaml)
        args += ["--config", str(tmp / "troupe.yaml")]
    args = started(args, sigint_ignored)
    log_path = tmp / "webhook.log"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=log)
    server = Server(proc, port, tls, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"webhook exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            conn = server.connection(timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                conn.close()
                return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"webhook did not answer /healthz in 30 s:\n{log_path.read_text()}")


def exchange(conn: Any, method: str, path: str, body: bytes | None = None,
             content_type: str = "application/json") -> tuple[int, bytes]:
    """One HTTP exchange on ``conn``: the status and the body of the answer."""
    headers = {"Content-Type": content_type} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.read()


def review_over_https(server: Server, review: dict[str, Any], conn: Any = None) -> dict[str, Any]:
    """POST ``review`` to ``server``'s ``/mutate`` (on ``conn``, else a connection of its own) and
    return the AdmissionReview it answers (asserting HTTP 200)."""
    own = conn is None
    conn = conn or server.connection()
    status, body = exchange(conn, "POST", "/mutate", json.dumps(review).encode())
    if own:
        conn.close()
    assert status == 200, body
    answer: dict[str, Any] = json.loads(body)
    return answer
