"""Kueue's topology-aware scheduling annotations, read as Troupe's own, and the marks of a
pod Kueue manages (docs/decisions/039-kueue-annotations.md; docs/guide/migration.md).

A workload written for Kueue's topology-aware scheduling (KEP-2724,
https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/) asks for its placement
with annotations on its pod templates. Troupe honours them the way it honours the GKE
topology gates, so the workload moves over unchanged:

=============================================================  =====================================
Kueue                                                          Troupe
=============================================================  =====================================
``kueue.x-k8s.io/podset-required-topology: L``                 ``troupe.io/topology-required-level: L``
``kueue.x-k8s.io/podset-preferred-topology: L``                ``troupe.io/topology-preferred-level: L``
``kueue.x-k8s.io/podset-unconstrained-topology: "true"``       a gang with no level
``kueue.x-k8s.io/podset-slice-required-topology: L`` and       ``troupe.io/topology-slice-required-level: L``
``kueue.x-k8s.io/podset-slice-size: N``                        and ``troupe.io/topology-slice-size: N``
``kueue.x-k8s.io/podset-slice-required-topology-constraints``  the same keys, one layer per entry
(JSON ``[{"topology": L, "size": N}, ...]``)                   (``"N1,N2"``, ``"L1,L2"``)
=============================================================  =====================================

They are read only when the pod carries none of Troupe's topology keys (Troupe's own win),
and only on pods Kueue does not manage: a pod that carries a mark Kueue itself puts on the
pods it admits (:func:`managed_by_kueue`) is Kueue's to place. An error names the Kueue key
the user wrote (:func:`rekeyed`).

Plain values only: no Kubernetes client, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from troupe.errors import ContractError
from troupe.layers import (
    TOPOLOGY_EXCLUSIVE_LEVEL,
    TOPOLOGY_PLACEMENT,
    TOPOLOGY_PREFERRED_LEVEL,
    TOPOLOGY_REQUIRED_LEVEL,
    TOPOLOGY_SLICE_REQUIRED_LEVEL,
    TOPOLOGY_SLICE_SIZE,
)

PODSET_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PODSET_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
PODSET_UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
PODSET_SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
PODSET_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
PODSET_SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
#: Every Kueue topology annotation Troupe reads.
TOPOLOGY_KEYS = (PODSET_REQUIRED_TOPOLOGY, PODSET_PREFERRED_TOPOLOGY, PODSET_UNCONSTRAINED_TOPOLOGY,
                 PODSET_SLICE_REQUIRED_TOPOLOGY, PODSET_SLICE_SIZE, PODSET_SLICE_CONSTRAINTS)
#: Troupe's topology keys, whose presence makes the Kueue ones unread.
TROUPE_TOPOLOGY_KEYS = (TOPOLOGY_REQUIRED_LEVEL, TOPOLOGY_PREFERRED_LEVEL, TOPOLOGY_SLICE_SIZE,
                        TOPOLOGY_SLICE_REQUIRED_LEVEL, TOPOLOGY_PLACEMENT, TOPOLOGY_EXCLUSIVE_LEVEL)
#: Troupe key -> the Kueue key it is read from (errors name the Kueue key).
_ALIASES = {
    TOPOLOGY_REQUIRED_LEVEL: PODSET_REQUIRED_TOPOLOGY,
    TOPOLOGY_PREFERRED_LEVEL: PODSET_PREFERRED_TOPOLOGY,
    TOPOLOGY_SLICE_REQUIRED_LEVEL: PODSET_SLICE_REQUIRED_TOPOLOGY,
    TOPOLOGY_SLICE_SIZE: PODSET_SLICE_SIZE,
}

# --- What Kueue puts on the pods it manages ------------------------------------------------
#: Kueue's topology gate: Kueue's TAS sets the pod's node selector, then removes it.
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
#: Kueue's gate on a plain pod (its pod integration) until its workload is admitted.
ADMISSION_GATE = "kueue.x-k8s.io/admission"
#: Set by Kueue on the pod template of a workload it admitted.
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
PODSET_LABEL = "kueue.x-k8s.io/podset"
#: Set by Kueue's pod webhook on the plain pods it manages.
MANAGED_LABEL = "kueue.x-k8s.io/managed"
#: Kueue's plain-pod groups: every pod of the group carries the name label and the count.
POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
#: The label a user puts on a workload (or a plain pod) to queue it in a LocalQueue of
#: Kueue: Kueue admits each such workload alone, against its ClusterQueue's quota
#: (docs/decisions/058-kueue-for-quota.md). Not a mark of Kueue's (:func:`managed_by_kueue`).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
#: Kueue's gates, which only Kueue removes.
GATES = (TOPOLOGY_GATE, ADMISSION_GATE)


def asks(a: Mapping[str, Any]) -> bool:
    """True when annotations ``a`` carry one of Kueue's topology annotations."""
    return any(k in a for k in TOPOLOGY_KEYS)


def managed_by_kueue(annotations: Mapping[str, Any], labels: Mapping[str, Any], gates: Sequence[str]) -> str:
    """The mark that says Kueue manages a pod (``"scheduling gate kueue.x-k8s.io/topology"``,
    ``"label kueue.x-k8s.io/podset"``...), or ``""``: Kueue's gates, the workload annotation
    and podset label Kueue writes on the templates of the workloads it admits, the label its
    pod webhook puts on the plain pods it manages. A queue-name label alone is not a mark:
    it is the user's, and stays in manifests after Kueue is gone."""
    for gate in GATES:
        if gate in gates:
            return f"scheduling gate {gate}"
    if WORKLOAD_ANNOTATION in annotations:
        return f"annotation {WORKLOAD_ANNOTATION}"
    for label in (PODSET_LABEL, MANAGED_LABEL):
        if label in labels:
            return f"label {label}"
    return ""


def as_troupe(a: Mapping[str, Any]) -> dict[str, Any]:
    """Annotations ``a`` with Kueue's topology annotations read as Troupe's (module
    docstring): ``a`` itself (a copy) when it carries a Troupe topology key or no Kueue one.
    Raises :class:`ContractError` naming the Kueue key for a value that has no Troupe
    reading: an unconstrained value that is not ``true``/``false``, more than one of
    required, preferred and unconstrained (as Kueue refuses), slice constraints that are
    not a JSON list of ``{"topology", "size"}`` or that come with the single-slice keys."""
    out = dict(a)
    if any(k in a for k in TROUPE_TOPOLOGY_KEYS) or not asks(a):
        return out
    for key in TOPOLOGY_KEYS:
        out.pop(key, None)
    unconstrained = a.get(PODSET_UNCONSTRAINED_TOPOLOGY)
    if unconstrained is not None and unconstrained not in ("true", "false"):
        raise ContractError(PODSET_UNCONSTRAINED_TOPOLOGY, str(unconstrained), "must be 'true' or 'false'")
    levels = [k for k in (PODSET_REQUIRED_TOPOLOGY, PODSET_PREFERRED_TOPOLOGY) if k in a]
    if unconstrained == "true":
        levels.append(PODSET_UNCONSTRAINED_TOPOLOGY)
    if len(levels) > 1:
        raise ContractError(levels[1], str(a[levels[1]]), f"cannot be set together with {levels[0]}")
    for troupe_key, kueue_key in _ALIASES.items():
        if kueue_key in a:
            out[troupe_key] = a[kueue_key]
    if PODSET_SLICE_CONSTRAINTS in a:
        raw = a[PODSET_SLICE_CONSTRAINTS]
        for single in (PODSET_SLICE_REQUIRED_TOPOLOGY, PODSET_SLICE_SIZE):
            if single in a:
                raise ContractError(PODSET_SLICE_CONSTRAINTS, str(raw), f"cannot be set together with {single}")
        out[TOPOLOGY_SLICE_SIZE], out[TOPOLOGY_SLICE_REQUIRED_LEVEL] = _constraints(raw)
    return out


def _constraints(raw: Any) -> tuple[str, str]:
    """The slice sizes and levels (``"32,4"``, ``"L1,L2"``) of Kueue's multi-layer slice
    constraints, a JSON list of ``{"topology": level, "size": n}``, outermost first."""
    problem = 'must be a JSON list of {"topology": "<level>", "size": <n>}, outermost first'
    try:
        entries = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):
        entries = None
    if not isinstance(entries, list) or not entries:
        raise ContractError(PODSET_SLICE_CONSTRAINTS, str(raw), problem)
    sizes, levels = [], []
    for entry in entries:
        topology = entry.get("topology") if isinstance(entry, dict) else None
        size = entry.get("size") if isinstance(entry, dict) else None
        if not isinstance(topology, str) or not topology or "," in topology \
                or not isinstance(size, int) or isinstance(size, bool):
            raise ContractError(PODSET_SLICE_CONSTRAINTS, str(raw), problem)
        sizes.append(str(size))
        levels.append(topology)
    return ",".join(sizes), ",".join(levels)


def rekeyed(e: ContractError, a: Mapping[str, Any]) -> ContractError:
    """``e``, raised on Troupe's reading of annotations ``a``, naming the Kueue key the
    user wrote instead of the Troupe key it was read as (and Kueue's keys in its words)."""
    if e.key in (TOPOLOGY_SLICE_SIZE, TOPOLOGY_SLICE_REQUIRED_LEVEL) and PODSET_SLICE_CONSTRAINTS in a:
        key = PODSET_SLICE_CONSTRAINTS
    else:
        key = _ALIASES.get(e.key, e.key)
    why = e.why
    for troupe_key, kueue_key in _ALIASES.items():
        why = why.replace(troupe_key, kueue_key)
    value = a.get(key, e.value)
    return ContractError(key, value if value is None or isinstance(value, str) else str(value), why)


def pod_group(labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> tuple[str, str] | None:
    """A Kueue plain-pod group's ``(name, total count)`` (the label
    :data:`POD_GROUP_NAME_LABEL` and the annotation :data:`POD_GROUP_TOTAL_COUNT`), read as a
    gang's name and size; None when the pod has no group name."""
    name = labels.get(POD_GROUP_NAME_LABEL)
    if not isinstance(name, str):
        return None
    count = annotations.get(POD_GROUP_TOTAL_COUNT)
    return name, count if isinstance(count, str) else ""
