"""Kueue on the local cluster: quota by Kueue, placement by Troupe.

The manager built by :mod:`.kueue` (:func:`~devtools.devcluster.kueue.ensure_kueue`) runs as the cluster admin, bound to 127.0.0.1 on free ports, with a Configuration that
enables the ``batch/job`` integration alone and turns Kueue's own topology-aware
scheduling off (two placers must not place one pod: docs/decisions/039-kueue-annotations.md),
its on-demand visibility server off (it would take a fixed port), and ``waitForPodsReady``
on, as the guide asks (docs/guide/kueue.md; docs/decisions/058-kueue-for-quota.md).

Its admission webhooks are served on 127.0.0.1 with a serving certificate signed by the
cluster's CA and registered with ``clientConfig.url``; internal certificate management is
off. Only the webhooks of Kueue's own kinds and of Jobs are registered, and the Jobs' only
for namespaces labelled :data:`MANAGED_NAMESPACE_LABEL` (also the manager's
``managedJobsNamespaceSelector``), so that the other tests' pods and Jobs on a shared
cluster never wait on Kueue.

This module imports :mod:`.cluster`, :mod:`.processes`, :mod:`.kueue` and
:mod:`.workloads` (the webhook rewriting and the start and stop of a manager with webhooks); nothing in the build imports it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

import certs
from devtools.devcluster.cluster import Cluster, free_ports
from devtools.devcluster.kueue import (
    KUEUE_CONFIG_API,
    KUEUE_CRD_FILES,
    METRICS_CERT_DIR_ENV,
    ensure_kueue,
)
from devtools.devcluster.processes import Monitor, Started, spawn
from devtools.devcluster.workloads import (
    local_webhooks,
    register_webhooks,
    unregister_and_stop,
    wait_for_dry_run,
    wait_ready,
)

#: The label (value ``"true"``) of the namespaces whose Jobs Kueue manages.
MANAGED_NAMESPACE_LABEL = "kueue.devcluster.troupe.io/managed"
#: The namespace Kueue's manager names as its own (its Configuration's ``namespace``).
KUEUE_NAMESPACE = "kueue-system"
#: Kueue's feature gates set apart from their defaults: its topology-aware scheduling off
#: (Troupe places) with the gates v0.19 refuses to keep on without it, and its visibility API
#: server off (it listens on a fixed port).
FEATURE_GATES = {
    "TopologyAwareScheduling": False,
    **dict.fromkeys(("TASProfileMixed", "TASHandleOverlappingFlavors", "TASFailedNodeReplacement",
                     "TASFailedNodeReplacementFailFast", "TASReplaceNodeOnPodTermination", "TASReplaceNodeOnNodeTaints",
                     "TASMultiLayerTopology", "TASRecomputeAssignmentWithinSchedulingCycle"), False),
    "VisibilityOnDemand": False,
}
#: How long an admitted workload may wait for all its pods to be Ready before Kueue evicts
#: it and frees its quota (``waitForPodsReady.timeout``).
PODS_READY_TIMEOUT = "5m"
#: The namespace of the dry-run Job that tells when Kueue's webhooks are in effect.
PROBE_NAMESPACE = "kueue-probe"
_CRDS = tuple(path.rsplit("_", 1)[1].removesuffix(".yaml") + ".kueue.x-k8s.io" for path in KUEUE_CRD_FILES)


def configuration(webhook_port: int, health_port: int, cert_dir: str) -> dict[str, Any]:
    """The manager's Configuration (``config.kueue.x-k8s.io/v1beta2``): webhooks on
    ``127.0.0.1:<webhook_port>`` with the certificate in ``cert_dir`` (``tls.crt``,
    ``tls.key``), probes on ``127.0.0.1:<health_port>``, no metrics listener, no leader
    election, no internal certificate management, the ``batch/job`` integration only, Jobs
    managed in the namespaces labelled :data:`MANAGED_NAMESPACE_LABEL`, ``waitForPodsReady``
    on and :data:`FEATURE_GATES`."""
    return {
        "apiVersion": KUEUE_CONFIG_API, "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": cert_dir},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}},
        "integrations": {"frameworks": ["batch/job"]},
        "waitForPodsReady": {"timeout": PODS_READY_TIMEOUT, "blockAdmission": False},
        "featureGates": dict(FEATURE_GATES),
    }


def _serves(hook: Mapping[str, Any], group: str, resource: str | None = None) -> bool:
    return any(group in (rule.get("apiGroups") or []) and (resource is None or resource in (rule.get("resources") or []))
               for rule in hook.get("rules") or [])


def registered_webhooks(docs: Sequence[Mapping[str, Any]], base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations (``manifests.yaml`` of its module) as registered
    here: each webhook calls ``<base_url><path>`` trusting ``ca_pem``
    (:func:`~devtools.devcluster.workloads.local_webhooks`, configurations named
    ``kueue-mutating`` and ``kueue-validating``); only the webhooks of Kueue's own kinds
    (``kueue.x-k8s.io``) and of Jobs are kept, the Jobs' with a ``namespaceSelector`` on
    :data:`MANAGED_NAMESPACE_LABEL`. Raises ``ValueError`` when no Job webhook is left (a
    Kueue release that renamed them)."""
    out = []
    jobs = 0
    for configuration_ in local_webhooks(docs, "kueue", base_url, ca_pem):
        hooks = []
        for hook in configuration_.get("webhooks") or []:
            if _serves(hook, "batch", "jobs"):
                hook["namespaceSelector"] = {"matchLabels": {MANAGED_NAMESPACE_LABEL: "true"}}
                jobs += 1
            elif not _serves(hook, "kueue.x-k8s.io"):
                continue
            hooks.append(hook)
        configuration_["webhooks"] = hooks
        out.append(configuration_)
    if not jobs:
        raise ValueError("Kueue's webhook manifests have no webhook for batch/v1 Jobs")
    return out


class Kueue:
    """Kueue's manager on ``cluster``; a context manager. Builds it first where the cache
    lacks it (:func:`~devtools.devcluster.kueue.ensure_kueue`). Installs Kueue's CRDs and the
    ``kueue-system`` namespace, starts the manager (:func:`configuration`), waits for its
    ``/readyz``, registers its webhooks (:func:`registered_webhooks`) and waits until they
    are in effect (a server-side dry run of a Job in a managed namespace comes back
    suspended). :meth:`stop` removes the webhook configurations first (so no write waits
    on a stopped server) and the probe's namespace, then stops the manager by its recorded
    pid. Log:
    ``<run_dir>/logs/kueue.log``. Kueue's objects and CRDs are left in place: delete the
    queues while the manager runs (their finalizers are Kueue's)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.build = ensure_kueue()
        self.dir = cluster.run_dir / "kueue"
        self._started: list[Started] = []
        self._monitor = Monitor([], lambda f: print(f"[kueue] {f}", file=sys.stderr, flush=True))
        self._configurations: list[tuple[str, str]] = []

    def __enter__(self) -> Kueue:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Kueue:
        """Install and start everything; raises ``RuntimeError`` naming the part that failed
        with the end of the manager's log (everything started is stopped first)."""
        try:
            self._install()
            self._start()
            self._monitor.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _install(self) -> None:
        self.cluster.kubectl("apply", "--server-side", "-f", str(self.build.crds))
        self.cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{c}" for c in _CRDS))
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}))

    def _start(self) -> None:
        cert_dir = self.dir / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        certs.write_pair(certs.create_serving_cert(self.cluster.ca_key_pair(), ["127.0.0.1", "localhost"], days=30),
                         cert_dir / "tls.crt", cert_dir / "tls.key")
        webhook_port, health_port = free_ports(2)
        config = self.dir / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(webhook_port, health_port, str(cert_dir))))
        env = dict(os.environ, KUBECONFIG=str(self.cluster.kubeconfig("admin")), **{METRICS_CERT_DIR_ENV: str(cert_dir)})
        started = spawn("kueue", [str(self.build.binary), f"--config={config}"],
                        self.cluster.logs_dir / "kueue.log", die_with_parent=True, env=env)
        self._started.append(started)
        self._monitor.add(started)
        wait_ready(started, health_port, "Kueue's manager", timeout=90.0)
        docs = [d for d in yaml.safe_load_all(self.build.webhooks.read_text()) if d]
        register_webhooks(self.cluster, registered_webhooks(docs, f"https://127.0.0.1:{webhook_port}",
                                                            self.cluster.ca_pem), self._configurations)
        self._wait_in_effect()

    def _wait_in_effect(self) -> None:
        """Until the API server calls Kueue's Job webhook: a dry-run Job with a queue name,
        in a managed namespace, comes back suspended."""
        probe = PROBE_NAMESPACE
        self.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": probe, "labels": {MANAGED_NAMESPACE_LABEL: "true"}}}))
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "probe", "namespace": probe, "labels": {"kueue.x-k8s.io/queue-name": "probe"}},
               "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                   {"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}
        wait_for_dry_run(self.cluster, job, lambda o: o["spec"].get("suspend") is True, what="Kueue's webhooks",
                         log=self._started[0].record.log)

    def check(self) -> None:
        """Raise ``RuntimeError`` if the manager has died."""
        failure = self._monitor.check_now()
        if failure is not None:
            raise RuntimeError(str(failure))

    def stop(self) -> None:
        """Unregister the webhooks, then stop the manager by its recorded pid."""
        self._monitor.stop()
        with contextlib.suppress(Exception):  # the cluster may be gone already
            self.cluster.kubectl("delete", "namespace", PROBE_NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
        unregister_and_stop(self.cluster, self._configurations, self._started)
