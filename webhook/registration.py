"""The MutatingWebhookConfiguration that sends pods to Troupe's webhook.

:func:`webhook_configuration` builds it as a plain dict (``admissionregistration.k8s.io/v1``)
for the lead's local-cluster harness (``url``) and the Helm chart (``service``). The CEL
``matchConditions`` keep every other pod away from the webhook, so a webhook outage with
``failurePolicy: Fail`` blocks only pods that opted in to Troupe (and reserved-annotation
writes), never the rest of the cluster. Rationale: ``docs/decisions/002-webhook.md``.

The expressions need Kubernetes >= 1.30 (matchConditions GA) and guard every optional
field: ``object.metadata.annotations`` may be absent, and ``oldObject`` is null on CREATE.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from troupe import kueue
from troupe.adoption import FIXED_WHILE_GATED
from troupe.config import DEFAULT_SCHEDULER_NAME, Config
from troupe.contract import (
    DEVICE_ENV_PREFIX,
    DEVICE_GROUP,
    GANG_MODE_AUTO,
    GANG_MODE_LABEL,
    GATE,
    GKE_GATE_PREFIX,
    RESERVED_PREFIX,
    SELECTED_DEVICES,
    TOPOLOGY_KEYS,
    GangKeys,
)
from troupe.podgroups import GROUP_ANNOTATIONS, GROUP_LABELS
from troupe.policies import GANG_POLICY_KEYS
from troupe.workloadkinds import MEMBER_LABELS, POD_OWNERS

#: The webhook's name inside the configuration (must be a fully qualified name).
WEBHOOK_NAME = "pods.troupe.io"
#: The path the Flask app serves admission on.
MUTATE_PATH = "/mutate"
#: The namespace opt-in entry: pods a supported workload creates in a namespace labelled
#: ``troupe.io/gang-mode: auto``, served on :data:`MUTATE_AUTO_PATH`, so the handler knows
#: the namespace opted in without reading it (docs/decisions/014-workload-gangs.md).
AUTO_WEBHOOK_NAME = "auto.pods.troupe.io"
MUTATE_AUTO_PATH = "/mutate-auto"
#: Default ``timeoutSeconds``: the webhook answers in milliseconds; a short timeout bounds
#: how long a pod creation can hang on an unhealthy replica.
DEFAULT_TIMEOUT_SECONDS = 5


def cel_string(value: str) -> str:
    """``value`` as a single-quoted CEL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _has_annotations(var: str) -> str:
    return f"has({var}.metadata) && has({var}.metadata.annotations)"


def troupe_keys_expression(config: Config, var: str = "object") -> str:
    """CEL: ``var`` carries a Troupe key (gang keys of the configured prefix, topology level
    requests, ``deviceshare.io/group``)."""
    present = " || ".join(f"{cel_string(k)} in {var}.metadata.annotations" for k in _troupe_keys(config))
    return f"({_has_annotations(var)} && ({present}))"


def kueue_keys_expression(var: str = "object") -> str:
    """CEL: ``var`` carries one of Kueue's topology annotations (:mod:`troupe.kueue`), which
    the webhook reads as Troupe's on pods Kueue does not manage."""
    present = " || ".join(f"{cel_string(k)} in {var}.metadata.annotations" for k in kueue.TOPOLOGY_KEYS)
    return f"({_has_annotations(var)} && ({present}))"


def _reserved_key(k: str) -> str:
    """CEL: the key ``k`` is one only the reconciler may write (mirrors
    :func:`troupe.contract.is_reserved_annotation`)."""
    return (f"{k}.startsWith({cel_string(RESERVED_PREFIX)}) || {k}.startsWith({cel_string(DEVICE_ENV_PREFIX)}) "
            f"|| {k} == {cel_string(SELECTED_DEVICES)}")


def reserved_keys_expression(var: str = "object") -> str:
    """CEL: ``var`` carries an annotation that only the reconciler may write (mirrors
    :func:`troupe.contract.is_reserved_annotation`)."""
    return f"({_has_annotations(var)} && {var}.metadata.annotations.exists(k, {_reserved_key('k')}))"


def _troupe_keys(config: Config) -> tuple[str, ...]:
    return (*GangKeys.for_prefix(config.gang_annotation_prefix).all(),
            *TOPOLOGY_KEYS, *GANG_POLICY_KEYS, DEVICE_GROUP)


def _not_kept(var: str, other: str, selected: str) -> str:
    """CEL: an annotation of ``var`` whose key ``k`` satisfies ``selected`` is missing from
    ``other`` or has another value there."""
    return (
        f"({_has_annotations(var)} && {var}.metadata.annotations.exists(k, ({selected}) && "
        f"!({_has_annotations(other)} && k in {other}.metadata.annotations && "
        f"{other}.metadata.annotations[k] == {var}.metadata.annotations[k])))"
    )


def annotations_changed_expression(selected: str, old: str = "oldObject", new: str = "object") -> str:
    """CEL: the annotations whose key ``k`` satisfies the CEL predicate ``selected`` differ
    between ``old`` and ``new`` (one added, changed or removed): the subsets are compared,
    not merely tested for presence, so an update that leaves them alone is not sent."""
    return f"({_not_kept(old, new, selected)} || {_not_kept(new, old, selected)})"


def reserved_keys_changed_expression(old: str = "oldObject", new: str = "object") -> str:
    """CEL: an UPDATE adds, changes or removes an annotation only the reconciler may write."""
    return annotations_changed_expression(_reserved_key("k"), old, new)


def troupe_keys_changed_expression(config: Config, old: str = "oldObject", new: str = "object") -> str:
    """CEL: an UPDATE adds, changes or removes a Troupe key (gang keys of the configured
    prefix, topology level requests, ``deviceshare.io/group``), which are fixed at creation."""
    keys = ", ".join(cel_string(k) for k in _troupe_keys(config))
    return annotations_changed_expression(f"k in [{keys}]", old, new)


def troupe_gate_expression(var: str = "object") -> str:
    """CEL: ``var`` carries Troupe's scheduling gate ``troupe.io/placement``."""
    return (
        f"(has({var}.spec) && has({var}.spec.schedulingGates) && {var}.spec.schedulingGates.exists(g, "
        f"has(g.name) && g.name == {cel_string(GATE)}))"
    )


def gke_gate_expression(var: str = "object") -> str:
    """CEL: ``var`` has a ``gke.io/topology-aware-auto-*`` scheduling gate."""
    return (
        f"(has({var}.spec) && has({var}.spec.schedulingGates) && {var}.spec.schedulingGates.exists(g, "
        f"has(g.name) && g.name.startsWith({cel_string(GKE_GATE_PREFIX)})))"
    )


def pod_group_expression(var: str = "object") -> str:
    """CEL: ``var`` names a pod group (:mod:`troupe.podgroups`): a non-empty
    ``spec.schedulingGroup.podGroupName`` (the upstream Workload API), Volcano's or KAI's
    annotation, or coscheduling's label. A key with an empty value names none, as
    :func:`troupe.podgroups.pod_group_ref` reads it."""
    annotations = " || ".join(
        f"({cel_string(k)} in {var}.metadata.annotations && {var}.metadata.annotations[{cel_string(k)}] != '')"
        for k in GROUP_ANNOTATIONS)
    labels = " || ".join(
        f"({cel_string(k)} in {var}.metadata.labels && {var}.metadata.labels[{cel_string(k)}] != '')"
        for k in GROUP_LABELS)
    return (
        f"((has({var}.spec) && has({var}.spec.schedulingGroup) && has({var}.spec.schedulingGroup.podGroupName) && "
        f"{var}.spec.schedulingGroup.podGroupName != '') || "
        f"({_has_annotations(var)} && ({annotations})) || "
        f"(has({var}.metadata) && has({var}.metadata.labels) && ({labels})))"
    )


def _has_label(var: str, key: str) -> str:
    """CEL: ``var`` carries the label ``key`` (a CEL string literal)."""
    return f"(has({var}.metadata) && has({var}.metadata.labels) && {key} in {var}.metadata.labels)"


def _label_changed(key: str, old: str, new: str) -> str:
    """CEL: the label ``key`` is added, changed or removed between ``old`` and ``new``."""
    k = cel_string(key)
    return (f"({_has_label(old, k)} ? !({_has_label(new, k)} && {new}.metadata.labels[{k}] == "
            f"{old}.metadata.labels[{k}]) : {_has_label(new, k)})")


def group_reference_changed_expression(old: str = "oldObject", new: str = "object") -> str:
    """CEL: an UPDATE adds, changes or removes a pod group reference in metadata (Volcano's
    or KAI's annotation, coscheduling's label, the scheduler the pod was adopted from:
    :data:`troupe.adoption.FIXED_WHILE_GATED`); ``spec.schedulingGroup`` is immutable."""
    keys = ", ".join(cel_string(k) for k in FIXED_WHILE_GATED)
    labels = " || ".join(_label_changed(k, old, new) for k in GROUP_LABELS)
    return f"({annotations_changed_expression(f'k in [{keys}]', old, new)} || {labels})"


def kube_scheduler_expression(config: Config, var: str = "object") -> str:
    """CEL: kube-scheduler will schedule ``var``: its ``spec.schedulerName`` is absent,
    ``default-scheduler`` or one of ``adoptSchedulerNames`` (which the webhook rewrites).
    A group pod bound for another scheduler is that scheduler's, and its creation does not
    depend on Troupe's webhook (docs/decisions/057-adopted-scheduler-names.md)."""
    names = ", ".join(cel_string(n) for n in (DEFAULT_SCHEDULER_NAME, *config.adopt_scheduler_names))
    return f"(!has({var}.spec) || !has({var}.spec.schedulerName) || {var}.spec.schedulerName in [{names}])"


def adopted_scheduler_expression(config: Config, var: str = "object") -> str | None:
    """CEL: ``var``'s ``spec.schedulerName`` is one of ``adoptSchedulerNames`` (None when
    the list is empty: no pod is adopted, and the condition is left out)."""
    if not config.adopt_scheduler_names:
        return None
    names = ", ".join(cel_string(n) for n in config.adopt_scheduler_names)
    return f"(has({var}.spec) && has({var}.spec.schedulerName) && {var}.spec.schedulerName in [{names}])"


def match_conditions(config: Config) -> list[dict[str, str]]:
    """The ``matchConditions``; all must hold for a request to reach the webhook.

    - ``troupe-pods``: on CREATE, the pod has a Troupe key, one of Kueue's topology
      annotations, a GKE topology gate or a reserved annotation, names a pod group
      (:func:`pod_group_expression`) and is kube-scheduler's
      (:func:`kube_scheduler_expression`), or has a ``spec.schedulerName`` of
      ``adoptSchedulerNames`` (:func:`adopted_scheduler_expression`); on UPDATE (of the pod
      or its ``pods/status``), the update adds, changes or removes a reserved annotation or
      a Troupe key, removes Troupe's gate, or changes a pod group reference of a pod behind
      Troupe's gate (:func:`group_reference_changed_expression`).
      An update that merely *has* them is not sent: the Job controller's patch that removes
      its finalizer from a released pod must not depend on the webhook being up
      (``docs/decisions/013-update-rules.md``).
    - ``not-reconciler-update``: UPDATEs by the reconciler's own identity skip the
      webhook (they are always allowed and never mutated), so placement writes do not
      depend on the webhook being up.
    """
    adopted = adopted_scheduler_expression(config)
    on_create = " || ".join(
        (troupe_keys_expression(config), kueue_keys_expression(), gke_gate_expression(), reserved_keys_expression(),
         f"({pod_group_expression()} && {kube_scheduler_expression(config)})", *([adopted] if adopted else []))
    )
    on_update = (
        f"oldObject != null && ({reserved_keys_changed_expression()} || "
        f"{troupe_keys_changed_expression(config)} || "
        f"({troupe_gate_expression('oldObject')} && !{troupe_gate_expression()}) || "
        f"({troupe_gate_expression('oldObject')} && {group_reference_changed_expression()}))"
    )
    return [
        {
            "name": "troupe-pods",
            "expression": f"request.operation == 'CREATE' ? ({on_create}) : ({on_update})",
        },
        {
            "name": "not-reconciler-update",
            "expression": (
                "request.operation != 'UPDATE' || "
                f"request.userInfo.username != {cel_string(config.reconciler_username)}"
            ),
        },
    ]


def workload_pod_expression(config: Config, var: str = "object") -> str:
    """CEL: ``var`` names neither a gang nor a size of the configured prefix, and a
    supported workload created it: its controller owner is one of
    :data:`troupe.workloadkinds.POD_OWNERS`, or it carries one of
    :data:`troupe.workloadkinds.MEMBER_LABELS`, a LeaderWorkerSet's name label (mirrors
    :func:`troupe.contract.created_by_workload`)."""
    keys = GangKeys.for_prefix(config.gang_annotation_prefix)
    named = " || ".join(f"{cel_string(k)} in {var}.metadata.annotations" for k in (keys.name, keys.size))
    return (
        f"!({_has_annotations(var)} && ({named})) && ("
        f"(has({var}.metadata.ownerReferences) && {var}.metadata.ownerReferences.exists(o, "
        f"has(o.controller) && o.controller && ({owners_expression(POD_OWNERS)}))) || "
        f"{member_labels_expression(MEMBER_LABELS, var)})"
    )


def owners_expression(owners: Sequence[tuple[str, str]]) -> str:
    """CEL over an owner reference ``o``: it is one of ``owners`` (``(API group, kind)``);
    ``false`` for none. The chart renders the same (devtools/chartkinds.py)."""
    return " || ".join(f"(o.apiVersion.startsWith({cel_string(group + '/')}) && o.kind == {cel_string(kind)})"
                       for group, kind in owners) or "false"


def member_labels_expression(labels: Sequence[str], var: str = "object") -> str:
    """CEL: ``var`` carries one of ``labels``; ``false`` for none. The chart renders the
    same (devtools/chartkinds.py)."""
    return " || ".join(f"(has({var}.metadata.labels) && {cel_string(label)} in {var}.metadata.labels)"
                       for label in labels) or "false"


def auto_match_conditions(config: Config) -> list[dict[str, str]]:
    """The ``matchConditions`` of the namespace opt-in entry: ``troupe-workload-pods``,
    a pod being created that a supported workload made and that does not name its gang
    itself (:func:`workload_pod_expression`)."""
    return [{
        "name": "troupe-workload-pods",
        "expression": f"request.operation == 'CREATE' && {workload_pod_expression(config)}",
    }]


def _client_config(url: str | None, service: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``clientConfig`` of the main entry, for ``url`` or ``service`` (the first one
    given; see :func:`webhook_configuration`). Raises ``ValueError`` for a URL that is not
    ``https://`` or a service without a namespace or a name."""
    client: dict[str, Any]
    if url is not None:
        if not url.startswith("https://"):
            raise ValueError(f"url must be https://..., got {url!r}")
        client = {"url": url}
    else:
        assert service is not None
        missing = [k for k in ("namespace", "name") if not service.get(k)]
        if missing:
            raise ValueError(f"service needs {', '.join(missing)}, got {dict(service)!r}")
        svc: dict[str, Any] = {
            "namespace": service["namespace"],
            "name": service["name"],
            "path": service.get("path", MUTATE_PATH),
        }
        if service.get("port") is not None:
            svc["port"] = int(service["port"])
        client = {"service": svc}
    return client


def _main_entry(client: dict[str, Any], config: Config, timeout_seconds: int) -> dict[str, Any]:
    """The main entry, :data:`WEBHOOK_NAME`, with its ``clientConfig`` ``client`` (the
    fixed settings are listed in :func:`webhook_configuration`)."""
    webhook: dict[str, Any] = {
        "name": WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client,
        "rules": [{
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["pods", "pods/status"],
            "scope": "Namespaced",
        }],
        "matchPolicy": "Equivalent",
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "timeoutSeconds": timeout_seconds,
        "reinvocationPolicy": "IfNeeded",
        "matchConditions": match_conditions(config),
    }
    if config.excluded_namespaces:
        webhook["namespaceSelector"] = {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": list(config.excluded_namespaces),
        }]}
    return webhook


def _auto_entry(webhook: Mapping[str, Any], config: Config) -> dict[str, Any]:
    """The namespace opt-in entry made from the main entry ``webhook``
    (:func:`webhook_configuration`): its path, CREATE of pods only, its match conditions and
    its namespace selector."""
    auto_client = dict(webhook["clientConfig"])
    if "url" in auto_client:
        auto_client["url"] = auto_client["url"].removesuffix(MUTATE_PATH) + MUTATE_AUTO_PATH
    else:
        auto_client["service"] = dict(auto_client["service"], path=MUTATE_AUTO_PATH)
    auto_selector: dict[str, Any] = {"matchLabels": {GANG_MODE_LABEL: GANG_MODE_AUTO}}
    if config.excluded_namespaces:
        auto_selector["matchExpressions"] = webhook["namespaceSelector"]["matchExpressions"]
    return dict(
        webhook, name=AUTO_WEBHOOK_NAME, clientConfig=auto_client,
        rules=[dict(webhook["rules"][0], operations=["CREATE"], resources=["pods"])],
        matchConditions=auto_match_conditions(config), namespaceSelector=auto_selector,
    )


def webhook_configuration(
    config: Config,
    url: str | None = None,
    service: Mapping[str, Any] | None = None,
    ca_bundle_pem: bytes = b"",
    name: str = "troupe",
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration object (a dict ready for ``kubectl apply``/the API).

    Exactly one of ``url`` (e.g. ``https://127.0.0.1:8443/mutate``, for a local cluster) or
    ``service`` (``{"namespace": ..., "name": ..., "port": 443}``, optional ``path``, default
    ``/mutate``, for in-cluster) must be given, else ``ValueError``. ``ca_bundle_pem`` is the
    PEM of the CA that signed the serving certificate (omitted when empty: the apiserver's
    trust roots are used then). Fixed settings: CREATE and UPDATE of ``pods`` and
    ``pods/status`` (whose updates can change annotations),
    ``sideEffects: None``, ``failurePolicy: Fail``, ``reinvocationPolicy: IfNeeded``,
    ``matchPolicy: Equivalent``, the :func:`match_conditions`, and a namespaceSelector that
    leaves out ``excludedNamespaces``.

    A second entry, :data:`AUTO_WEBHOOK_NAME`, on :data:`MUTATE_AUTO_PATH`: CREATE of pods
    in namespaces labelled ``troupe.io/gang-mode: auto`` (its namespaceSelector, which also
    leaves out ``excludedNamespaces``) that a supported workload creates
    (:func:`auto_match_conditions`); otherwise the same settings.
    """
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url (local cluster) or service (in-cluster)")
    if not 1 <= timeout_seconds <= 30:
        raise ValueError(f"timeout_seconds must be 1..30 (the API's range), got {timeout_seconds}")
    client = _client_config(url, service)
    if ca_bundle_pem:
        client["caBundle"] = base64.b64encode(ca_bundle_pem).decode("ascii")
    webhook = _main_entry(client, config, timeout_seconds)
    auto = _auto_entry(webhook, config)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "troupe"}},
        "webhooks": [webhook, auto],
    }
