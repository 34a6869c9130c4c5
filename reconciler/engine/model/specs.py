"""What a pod's ``spec`` gives, parsed once per distinct spec and kept while a pod uses it:
:class:`SpecValues` and :func:`spec_values` (docs/decisions/060-pod-spec-memo.md,
docs/decisions/063-memos-held-by-their-users.md).

The pods of one template (a Job's, a DaemonSet's) differ in ``nodeName`` and in nothing
else that is read here, so 100,000 pods have a few hundred specs between them, and each
is parsed once. A parse is remembered only as long as a parsed pod holds it
(:attr:`~reconciler.engine.model.pods.PodInfo.spec_values`), as kube-scheduler's cache
drops a pod's parsed form with the pod: what a tenant's pods leave behind once they are
deleted is nothing, however many distinct specs they had.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from reconciler.engine.model.fields import ObjectError, shared
from reconciler.engine.model.podterms import parse_pod_terms
from reconciler.engine.model.resources import pod_requests
from reconciler.engine.model.selectors import NodeFilter, parse_node_filter
from troupe.bounds import pod_terms_error


@dataclass(frozen=True, slots=True, weakref_slot=True)
class SpecValues:
    """What :meth:`~reconciler.engine.model.pods.PodInfo.from_object` reads from a pod's
    ``spec`` alone, the node it is bound to aside: its requests (units, one ``pods``
    included), node filter, scheduling gates (names), priority, ``terminationGracePeriodSeconds``
    (seconds), the pod group it names (``spec.schedulingGroup.podGroupName``), why its term
    lists are over :data:`troupe.bounds.MAX_POD_TERMS` (None when they are not), and whether
    it may carry :class:`~reconciler.engine.model.podterms.PodTerms`, which also read the
    pod's namespace, name and labels and so are parsed per pod (False: they are None).
    Weakly referenceable: the memo of :func:`spec_values` holds it only through its pods."""

    requests: Mapping[str, int]
    node_filter: NodeFilter
    gates: tuple[str, ...]
    priority: int
    grace_seconds: int
    scheduling_group: str | None
    terms_error: str | None
    may_have_terms: bool
    #: ``spec.activeDeadlineSeconds`` (seconds the kubelet lets the pod run from its
    #: ``status.startTime``), None when unset or not a positive integer.
    deadline_seconds: int | None = None


_ENCODE = msgspec.json.Encoder().encode
_DECODE = msgspec.json.Decoder().decode

#: The largest spec :func:`spec_values` remembers, in bytes of JSON (a pod's spec as the
#: cache keeps it is about 1 KB): the memo's key is held beside the pods that use it, so a
#: pod of a larger spec is parsed on its own instead of adding its JSON to what it holds.
SPEC_MEMO_MAX_BYTES = 8192

#: Spec JSON -> its parse, kept while a parsed pod holds the value (a pod's
#: :attr:`~reconciler.engine.model.pods.PodInfo.spec_values`), dropped with the last one.
_memo: weakref.WeakValueDictionary[bytes, SpecValues] = weakref.WeakValueDictionary()


def spec_values(spec: Mapping[str, Any]) -> SpecValues:
    """The :class:`SpecValues` of a pod ``spec`` (a JSON object), parsed once per distinct
    spec while a pod of that spec is held (docs/decisions/060-pod-spec-memo.md,
    docs/decisions/063-memos-held-by-their-users.md). The spec less ``nodeName`` is encoded
    as JSON and that text is the memo's key (about 2 µs); equal texts are equal JSON values,
    which the parse below reads alike, and the parse reads the value decoded from the text,
    so a spec holding values JSON cannot hold (a tuple, a set) is read as JSON would carry
    it or, when it cannot be encoded at all, parsed as it is. A spec of more than
    :data:`SPEC_MEMO_MAX_BYTES` is parsed each time. The memo holds each value weakly: the
    caller keeps what it was given as long as it needs it to stay remembered (a parsed pod
    does). Raises :class:`~reconciler.engine.model.fields.ObjectError` naming the bad field
    (not remembered: a bad spec is parsed, and refused, each time)."""
    try:
        key = _ENCODE({k: v for k, v in spec.items() if k != "nodeName"})
    except (TypeError, ValueError, OverflowError):  # not JSON: parsed as it is, not remembered
        return _parse_spec(spec)
    if len(key) > SPEC_MEMO_MAX_BYTES:
        return _parse_spec(spec)
    found = _memo.get(key)
    if found is None:
        found = _memo[key] = _parse_spec(_DECODE(key))
    return found


def remembered() -> int:
    """How many distinct specs the memo of :func:`spec_values` holds now (as many as the
    pods held anywhere in the process have between them)."""
    return len(_memo)


def _parse_spec(spec: Mapping[str, Any]) -> SpecValues:
    priority = 0 if spec.get("priority") is None else spec["priority"]
    if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31:
        raise ObjectError("spec.priority", f"expected an int32, got {type(priority).__name__}")
    requests = pod_requests(spec)
    node_filter = parse_node_filter(spec)
    gates = tuple(shared(gate) for gate in _gates(spec))
    terms_error = pod_terms_error(spec)
    # Whether a pod has terms does not hang on its namespace, name or labels, only what they say.
    may_have_terms = terms_error is not None or parse_pod_terms("default", "pod", {}, spec) is not None
    return SpecValues(requests, node_filter, gates, priority, _grace(spec), scheduling_group(spec), terms_error,
                      may_have_terms, _deadline(spec))


def scheduling_group(spec: Mapping[str, Any]) -> str | None:
    """``spec.schedulingGroup.podGroupName`` (KEP-4671), None when absent or not a string."""
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) and name else None


def _gates(spec: Mapping[str, Any]) -> list[str]:
    """The names of ``spec.schedulingGates``; raises :class:`ObjectError` naming a bad one."""
    gates = []
    raw_gates = spec.get("schedulingGates") or []
    if not isinstance(raw_gates, list):
        raise ObjectError("spec.schedulingGates", f"expected a list, got {type(raw_gates).__name__}")
    for i, gate in enumerate(raw_gates):
        if not isinstance(gate, Mapping) or not isinstance(gate.get("name"), str):
            raise ObjectError(f"spec.schedulingGates[{i}].name", "missing field")
        gates.append(gate["name"])
    return gates


def _deadline(spec: Mapping[str, Any]) -> int | None:
    value = spec.get("activeDeadlineSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63 else None


def _grace(spec: Mapping[str, Any]) -> int:
    value = spec.get("terminationGracePeriodSeconds")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else 30
