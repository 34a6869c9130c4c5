"""What a pod asks of the pods around it and of its node's ports and volumes, parsed once.

The fields kube-scheduler's default profile filters on beyond node selection, taints and
resources (:mod:`.selectors`), as plain values:

- required pod affinity and anti-affinity (``spec.affinity.podAffinity`` /
  ``podAntiAffinity``, ``requiredDuringSchedulingIgnoredDuringExecution``): the
  ``InterPodAffinity`` plugin (Kubernetes docs "Assigning Pods to Nodes", "Inter-pod
  affinity and anti-affinity"). ``preferred...`` terms only score: not kept;
- ``spec.topologySpreadConstraints`` (``PodTopologySpread``, docs "Pod Topology Spread
  Constraints"): ``DoNotSchedule`` ones filter; ``ScheduleAnyway`` ones only score, but
  their presence turns the cluster's default constraints off for the pod;
- host ports of containers and sidecars (``NodePorts``);
- the PersistentVolumeClaims the pod mounts, by name (``VolumeBinding``, ``VolumeZone``,
  ``VolumeRestrictions``, ``NodeVolumeLimits``; :mod:`.volumes`), an ephemeral volume's
  claim being ``<pod>-<volume>`` (docs "Ephemeral Volumes");
- what the engine does not model (:attr:`PodTerms.unmodeled`, :func:`reconciler.engine.filters.unmodeled.unmodeled`).

``matchLabelKeys`` / ``mismatchLabelKeys`` are merged into the selectors here, as
kube-apiserver merges them at creation (KEP-3633 for affinity, KEP-3243 for spread): a key
the pod carries adds ``key In [value]`` (``NotIn`` for ``mismatchLabelKeys``); merging an
already merged selector again changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.engine.model.fields import ObjectError, mapping, path, sequence, string
from reconciler.engine.model.selectors import Requirement
from troupe.bounds import MAX_POD_TERMS

#: ``whenUnsatisfiable`` of a spread constraint that filters.
DO_NOT_SCHEDULE = "DoNotSchedule"
#: Selector operators of ``metav1.LabelSelector``.
_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
#: Inline volume kinds kube-scheduler's ``VolumeRestrictions`` checks for disk conflicts,
#: and inline CSI volumes that ``NodeVolumeLimits`` counts: Troupe reads neither.
_INLINE_VOLUMES = ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi", "csi")


@dataclass(frozen=True)
class LabelSelector:
    """A ``metav1.LabelSelector``: every requirement holds (``matchLabels`` as ``In``).
    The empty selector selects every pod; an absent selector (None where one is held)
    selects none (``metav1.LabelSelectorAsSelector``)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a pod (or namespace) with these labels is selected."""
        return all(r.matches(labels.get(r.key)) for r in self.requirements)

    def merged(self, labels: Mapping[str, str], keys: tuple[str, ...], operator: str) -> LabelSelector:
        """This selector with ``key <operator> [labels[key]]`` for each key the labels
        hold (``matchLabelKeys``: ``In``; ``mismatchLabelKeys``: ``NotIn``), once."""
        added = [Requirement(key, operator, (labels[key],)) for key in keys if key in labels]
        fresh = tuple(r for r in added if r not in self.requirements)
        return LabelSelector(self.requirements + fresh) if fresh else self


@dataclass(frozen=True)
class PodAffinityTerm:
    """One required pod (anti-)affinity term, namespaces resolved (``AffinityTerm`` of
    kube-scheduler's framework): it selects a pod whose namespace is in ``namespaces`` or
    matches ``namespace_selector`` and whose labels match ``selector``; with no namespaces
    and no namespace selector, ``namespaces`` is the owner's own namespace."""

    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None = None

    def __hash__(self) -> int:
        """Computed once: members of a gang share equal terms, looked up many times."""
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = self.__dict__["_hash"] = hash(
                (self.topology_key, self.selector, self.namespaces, self.namespace_selector))
        return cached

    def selects(self, namespace: str, labels: Mapping[str, str],
                namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        """Whether the pod in ``namespace`` with ``labels`` is selected; ``namespace_labels``
        holds the labels of the namespaces Troupe knows (an unknown namespace has none)."""
        if self.selector is None:
            return False
        if namespace not in self.namespaces and (
                self.namespace_selector is None
                or not self.namespace_selector.matches(namespace_labels.get(namespace, {}))):
            return False
        return self.selector.matches(labels)


@dataclass(frozen=True)
class SpreadConstraint:
    """One ``whenUnsatisfiable: DoNotSchedule`` topology spread constraint: at most
    ``max_skew`` more matching pods (the owner's namespace, ``selector``) in the node's
    domain of ``topology_key`` than in the emptiest domain; with fewer than
    ``min_domains`` domains the emptiest counts 0. ``honor_affinity``
    (``nodeAffinityPolicy: Honor``, the default) and ``honor_taints``
    (``nodeTaintsPolicy: Honor``; default ``Ignore``) say which nodes' domains count."""

    topology_key: str
    max_skew: int
    selector: LabelSelector | None
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False


@dataclass(frozen=True)
class HostPort:
    """A container port bound on the node: ``host_ip`` (``""`` or ``0.0.0.0``: every
    address), ``protocol`` (``TCP`` by default) and ``port``."""

    host_ip: str
    protocol: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        """``NodePorts``' rule: same protocol and port, and the same address or either on
        every address."""
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wild = ("", "0.0.0.0")
        return self.host_ip == other.host_ip or self.host_ip in wild or other.host_ip in wild


@dataclass(frozen=True)
class PodTerms:
    """What a pod asks of its neighbours, ports and volumes (module docstring). None on a
    :class:`~reconciler.engine.model.pods.PodInfo` that asks for none of it, so most pods
    cost nothing. ``claims``: names of the PersistentVolumeClaims it mounts (its
    namespace). ``any_spread``: it has spread constraints of its own, even only
    ``ScheduleAnyway`` ones (then the cluster's default constraints do not apply).
    ``unmodeled``: short phrases naming what it uses that the engine does not model."""

    affinity: tuple[PodAffinityTerm, ...] = ()
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    claims: tuple[str, ...] = ()
    any_spread: bool = False
    unmodeled: tuple[str, ...] = ()

    def __hash__(self) -> int:
        """Computed once (as :meth:`PodAffinityTerm.__hash__`)."""
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = self.__dict__["_hash"] = hash((self.affinity, self.anti_affinity, self.spread, self.host_ports,
                                                    self.claims, self.any_spread, self.unmodeled))
        return cached


def _item(value: Any) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    raise ObjectError("", f"expected a mapping, got {type(value).__name__}")


def _strings(obj: Mapping[str, Any], key: str) -> tuple[str, ...]:
    values = sequence(obj, key)
    if not all(isinstance(v, str) for v in values):
        raise ObjectError(key, "expected a list of strings")
    return tuple(values)


def parse_selector(raw: Any) -> LabelSelector | None:
    """A ``metav1.LabelSelector`` (None for an absent one); raises :class:`ObjectError`."""
    if raw is None:
        return None
    selector = _item(raw)
    requirements = [Requirement(k, "In", (v,)) for k, v in sorted(mapping(selector, "matchLabels").items())
                    if isinstance(v, str)]
    for i, expression in enumerate(sequence(selector, "matchExpressions")):
        try:
            expression = _item(expression)
            operator = string(expression, "operator", required=True)
            if operator not in _SELECTOR_OPERATORS:
                raise ObjectError("operator", f"unknown operator {operator!r}")
            requirements.append(Requirement(string(expression, "key", required=True), operator,
                                            _strings(expression, "values")))
        except ObjectError as e:
            raise e.below(path("matchExpressions", i)) from None
    return LabelSelector(tuple(requirements))


def _affinity_terms(raw: Any, namespace: str, labels: Mapping[str, str]) -> tuple[PodAffinityTerm, ...]:
    """The required terms of a ``podAffinity``/``podAntiAffinity`` mapping: the first
    :data:`~troupe.bounds.MAX_POD_TERMS` (a pod past the bound is held, or, not a
    member, read that far)."""
    out = []
    for i, term in enumerate(sequence(_item(raw), "requiredDuringSchedulingIgnoredDuringExecution")[:MAX_POD_TERMS]):
        try:
            term = _item(term)
            selector = parse_selector(term.get("labelSelector"))
            if selector is not None:
                selector = selector.merged(labels, _strings(term, "matchLabelKeys"), "In")
                selector = selector.merged(labels, _strings(term, "mismatchLabelKeys"), "NotIn")
            namespaces = frozenset(_strings(term, "namespaces"))
            namespace_selector = parse_selector(term.get("namespaceSelector"))
            if not namespaces and namespace_selector is None:
                namespaces = frozenset({namespace})
            out.append(PodAffinityTerm(string(term, "topologyKey", required=True), selector, namespaces,
                                       namespace_selector))
        except ObjectError as e:
            raise e.below(path("requiredDuringSchedulingIgnoredDuringExecution", i)) from None
    return tuple(out)


def _spread(spec: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[tuple[SpreadConstraint, ...], bool]:
    raw = sequence(spec, "topologySpreadConstraints")
    out = []
    for i, constraint in enumerate(raw[:MAX_POD_TERMS]):
        try:
            constraint = _item(constraint)
            if string(constraint, "whenUnsatisfiable") != DO_NOT_SCHEDULE:
                continue
            selector = parse_selector(constraint.get("labelSelector"))
            if selector is not None:
                selector = selector.merged(labels, _strings(constraint, "matchLabelKeys"), "In")
            max_skew, min_domains = constraint.get("maxSkew"), constraint.get("minDomains") or 1
            if not isinstance(max_skew, int) or isinstance(max_skew, bool) or max_skew < 1:
                raise ObjectError("maxSkew", f"expected an integer >= 1, got {max_skew!r}")
            if not isinstance(min_domains, int) or isinstance(min_domains, bool) or min_domains < 1:
                raise ObjectError("minDomains", f"expected an integer >= 1, got {min_domains!r}")
            out.append(SpreadConstraint(
                string(constraint, "topologyKey", required=True), max_skew, selector, min_domains,
                string(constraint, "nodeAffinityPolicy", default="Honor") == "Honor",
                string(constraint, "nodeTaintsPolicy", default="Ignore") == "Honor"))
        except ObjectError as e:
            raise e.below(path("topologySpreadConstraints", i)) from None
    return tuple(out), bool(raw)


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Host ports of the containers and of restartable init containers (sidecars), as
    ``NodePorts`` collects them."""
    out = []
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(sequence(spec, kind)):
            if not isinstance(container, Mapping):
                continue
            if kind == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            for k, port in enumerate(sequence(container, "ports", path(kind, i))):
                if not isinstance(port, Mapping) or not port.get("hostPort"):
                    continue
                number = port["hostPort"]
                if not isinstance(number, int) or isinstance(number, bool):
                    raise ObjectError(path(kind, i, "ports", k, "hostPort"), f"expected an integer, got {number!r}")
                out.append(HostPort(string(port, "hostIP"), string(port, "protocol", default="TCP") or "TCP", number))
    return tuple(out)


def _volumes(spec: Mapping[str, Any], pod_name: str) -> tuple[tuple[str, ...], list[str]]:
    """The claims a pod mounts, and phrases for the inline volumes Troupe does not model."""
    claims, unmodeled = [], []
    for i, volume in enumerate(sequence(spec, "volumes")):
        if not isinstance(volume, Mapping):
            raise ObjectError(path("volumes", i), f"expected a mapping, got {type(volume).__name__}")
        name = string(volume, "name", path("volumes", i))
        if volume.get("persistentVolumeClaim") is not None:
            claims.append(string(mapping(volume, "persistentVolumeClaim", path("volumes", i)), "claimName",
                                 path("volumes", i, "persistentVolumeClaim"), required=True))
        elif volume.get("ephemeral") is not None:
            claims.append(f"{pod_name}-{name}")
        for kind in _INLINE_VOLUMES:
            if volume.get(kind) is not None:
                unmodeled.append(f"inline {kind} volume {name}")
    return tuple(claims), unmodeled


def parse_pod_terms(namespace: str, name: str, labels: Mapping[str, str], spec: Mapping[str, Any]) -> PodTerms | None:
    """A pod's :class:`PodTerms` from its namespace, name, labels and spec, or None when
    it asks for none of it. Raises :class:`ObjectError` naming the bad field (below
    ``spec``)."""
    affinity = mapping(spec, "affinity", "spec")
    found: list[tuple[PodAffinityTerm, ...]] = []
    for kind in ("podAffinity", "podAntiAffinity"):
        try:
            found.append(_affinity_terms(affinity[kind], namespace, labels) if affinity.get(kind) else ())
        except ObjectError as e:
            raise e.below(path("spec.affinity", kind)) from None
    terms, anti_terms = found
    try:
        spread, any_spread = _spread(spec, labels)
        ports = _host_ports(spec)
        claims, unmodeled = _volumes(spec, name)
    except ObjectError as e:
        raise e.below("spec") from None
    if not (terms or anti_terms or spread or any_spread or ports or claims or unmodeled):
        return None
    return PodTerms(terms, anti_terms, spread, ports, claims, any_spread, tuple(unmodeled))
