"""What a pod asks of a node's labels, name and taints, parsed: taints and tolerations,
node selector requirements and terms, and a pod's :class:`NodeFilter` (its
``spec.nodeSelector``, required node affinity and tolerations), with the matching rules
kube-scheduler applies (``k8s.io/api/core/v1`` ``ToleratesTaint``,
``component-helpers/scheduling/corev1/nodeaffinity``). The filters that use them, with
their reasons, are :mod:`reconciler.engine.filters`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from reconciler.engine.model.fields import ObjectError, mapping, path, sequence, string, string_map

#: Taint effects that keep a pod off a node (``PreferNoSchedule`` only scores).
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
#: The only field ``matchFields`` may name.
NAME_FIELD = "metadata.name"

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True)
class Taint:
    """A node taint."""

    key: str
    value: str
    effect: str

    def describe(self) -> str:
        """``key=value`` (or ``key`` when it has no value), as reasons show it."""
        return f"{self.key}={self.value}" if self.value else self.key


@dataclass(frozen=True)
class Toleration:
    """A pod toleration. ``operator`` is ``Equal`` (the default) or ``Exists`` (any other
    tolerates nothing); an empty ``key`` with ``Exists`` tolerates every taint; an empty
    ``effect`` every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """``ToleratesTaint`` of ``k8s.io/api/core/v1``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator == "Equal" and self.value == taint.value


@dataclass(frozen=True)
class Requirement:
    """One ``matchExpressions``/``matchFields`` entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, value: str | None) -> bool:
        """Whether a node whose label (or field) ``key`` is ``value`` (None: absent)
        satisfies the requirement."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        # Gt / Lt: both sides must be integers; a single value (checked when parsed).
        if value is None:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True)
class Term:
    """A node selector term: all expressions (on labels) and fields (on the name) hold."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        """An empty term matches no node (``nodeaffinity`` skips it)."""
        if not self.expressions and not self.fields:
            return False
        return all(r.matches(labels.get(r.key)) for r in self.expressions) and all(
            r.matches(name if r.key == NAME_FIELD else None) for r in self.fields
        )


@dataclass(frozen=True)
class NodeFilter:
    """What a pod demands of a node besides resources. Hashable: pods with equal filters
    share one evaluation over the nodes.

    ``terms`` is None when the pod has no required node affinity (any node), and a tuple
    of ORed terms otherwise (an empty tuple matches no node).
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()

    def untolerated(self, taints: Sequence[Taint]) -> Taint | None:
        """The first blocking taint no toleration tolerates, or None."""
        for taint in taints:
            if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in self.tolerations):
                return taint
        return None

    def selector_matches(self, labels: Mapping[str, str]) -> bool:
        """``spec.nodeSelector``: every pair present on the node."""
        return all(labels.get(k) == v for k, v in self.node_selector)

    def affinity_matches(self, labels: Mapping[str, str], name: str) -> bool:
        """Required node affinity: some term matches (always true without affinity)."""
        return self.terms is None or any(t.matches(labels, name) for t in self.terms)

    def on_node(self, name: str) -> NodeFilter:
        """This filter narrowed to the node named ``name``: a ``matchFields``
        ``metadata.name In [name]`` requirement ANDed into every term (one term when there
        were none). What a member of a bound SharedDeviceGroup asks: its group's node."""
        pin = Requirement(NAME_FIELD, "In", (name,))
        terms = (Term(fields=(pin,)),) if self.terms is None else tuple(
            Term(t.expressions, (*t.fields, pin)) for t in self.terms)
        return NodeFilter(self.node_selector, terms, self.tolerations)


def _mapping_item(value: Any) -> Mapping[str, Any]:
    """A list item as a mapping; the error names no field (the caller places it)."""
    if type(value) is dict or isinstance(value, Mapping):
        return value
    raise ObjectError("", f"expected a mapping, got {type(value).__name__}")


#: Equal taints and tolerations are one value: most pods and nodes repeat a few.
_taint = lru_cache(maxsize=1024)(Taint)
_toleration = lru_cache(maxsize=1024)(Toleration)


def parse_taints(spec: Mapping[str, Any], base: str = "spec") -> tuple[Taint, ...]:
    """``spec.taints`` of a node."""
    raw = sequence(spec, "taints", base)
    out = []
    for i, t in enumerate(raw):
        try:
            t = _mapping_item(t)
            out.append(_taint(string(t, "key", required=True), string(t, "value"), string(t, "effect")))
        except ObjectError as e:
            raise e.below(path(base, "taints", i)) from None
    return tuple(out)


def parse_tolerations(spec: Mapping[str, Any], base: str = "spec") -> tuple[Toleration, ...]:
    """``spec.tolerations`` of a pod."""
    raw = sequence(spec, "tolerations", base)
    out = []
    for i, t in enumerate(raw):
        if type(t) is dict:  # the usual shape, all four fields strings or absent
            key, operator, value, effect = t.get("key", ""), t.get("operator", ""), t.get("value", ""), t.get("effect", "")
            if type(key) is str and type(operator) is str and type(value) is str and type(effect) is str:
                out.append(_toleration(key, operator or "Equal", value, effect))
                continue
        try:
            t = _mapping_item(t)
            # An operator Troupe does not know tolerates nothing, as in kube-scheduler.
            operator = string(t, "operator", default="Equal")
            out.append(_toleration(string(t, "key"), operator, string(t, "value"), string(t, "effect")))
        except ObjectError as e:
            raise e.below(path(base, "tolerations", i)) from None
    return tuple(out)


def _requirement(raw: Any) -> Requirement:
    r = _mapping_item(raw)
    op = string(r, "operator", required=True)
    if op not in _OPERATORS:
        raise ObjectError("operator", f"unknown operator {op!r}")
    values = sequence(r, "values")
    if not all(isinstance(v, str) for v in values):
        raise ObjectError("values", "expected a list of strings")
    if op in ("Gt", "Lt") and len(values) != 1:
        raise ObjectError("values", f"{op} needs exactly one value")
    return Requirement(string(r, "key", required=True), op, tuple(values))


def requirements(term: Mapping[str, Any], key: str) -> tuple[Requirement, ...]:
    """The requirements of ``term[key]`` (``matchExpressions`` of a node selector term or
    of a label selector, ``matchFields``); raises
    :class:`~reconciler.engine.model.fields.ObjectError` naming the bad entry."""
    out = []
    for i, r in enumerate(sequence(term, key)):
        try:
            out.append(_requirement(r))
        except ObjectError as e:
            raise e.below(path(key, i)) from None
    return tuple(out)


def parse_node_terms(required: Mapping[str, Any]) -> tuple[Term, ...]:
    """The ORed ``nodeSelectorTerms`` of a required node selector (a pod's required node
    affinity, a PersistentVolume's ``spec.nodeAffinity.required``); raises
    :class:`ObjectError` naming the bad term."""
    parsed = []
    for i, raw in enumerate(sequence(required, "nodeSelectorTerms")):
        try:
            term = _mapping_item(raw)
            parsed.append(Term(requirements(term, "matchExpressions"), requirements(term, "matchFields")))
        except ObjectError as e:
            raise e.below(path("nodeSelectorTerms", i)) from None
    return tuple(parsed)


def parse_node_filter(spec: Mapping[str, Any], base: str = "spec") -> NodeFilter:
    """A pod's :class:`NodeFilter` from its spec."""
    selector = tuple(sorted(string_map(spec, "nodeSelector", base).items()))
    terms: tuple[Term, ...] | None = None
    if spec.get("affinity") is not None:
        try:
            affinity = mapping(mapping(spec, "affinity"), "nodeAffinity", "affinity")
            required = mapping(affinity, "requiredDuringSchedulingIgnoredDuringExecution", "affinity.nodeAffinity")
            if required:
                try:
                    terms = parse_node_terms(required)
                except ObjectError as e:
                    raise e.below("affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution") from None
        except ObjectError as e:
            raise e.below(base) from None
    return NodeFilter(selector, terms, parse_tolerations(spec, base))


