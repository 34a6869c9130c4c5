"""ProvisioningRequests: the configuration key ``provisioning`` and the API's names.

A gang that does not fit may ask the cluster's autoscaler for room, all or nothing, with one
``ProvisioningRequest`` (``autoscaling.x-k8s.io/v1``, the CRD cluster-autoscaler serves:
``cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go`` of
kubernetes/autoscaler; docs/decisions/080-provisioning-requests.md). Off by default.

Example::

    provisioning:
      className: best-effort-atomic-scale-up.autoscaling.x-k8s.io
      parameters: {}                      # spec.parameters: strings, as the class documents them
      namespaceSelector:                  # which namespaces' gangs may ask (absent: every one)
        matchLabels: {troupe.io/provisioning: "on"}
      preferPreemption: true              # evict lower-priority gangs first when that makes room

A gang may name another class with the annotation :data:`CLASS_ANNOTATION` on its members.
Pure: no I/O; :func:`parse` raises :class:`~troupe.errors`-style ``ValueError`` subclasses
through the caller (``troupe.config.ConfigError``) with the field and the value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: The API group and version of ProvisioningRequest (cluster-autoscaler's CRD).
GROUP = "autoscaling.x-k8s.io"
VERSION = "v1"
PLURAL = "provisioningrequests"
KIND = "ProvisioningRequest"

#: The classes cluster-autoscaler implements (``apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go``)
#: and GKE's Dynamic Workload Scheduler class.
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
ATOMIC_SCALE_UP = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
QUEUED_PROVISIONING = "queued-provisioning.gke.io"

#: The pod annotations that say a pod consumes a request and of which class
#: (``ProvisioningRequestPodAnnotationKey`` and ``ProvisioningClassPodAnnotationKey`` of
#: the same ``types.go``), so cluster-autoscaler does not scale up for it again.
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_POD_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"

#: The request's condition types (``types.go``): ``Accepted``, ``Provisioned``, ``Failed``,
#: ``BookingExpired``, ``CapacityRevoked``.
ACCEPTED, PROVISIONED, FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED = (
    "Accepted", "Provisioned", "Failed", "BookingExpired", "CapacityRevoked")

#: A gang's own class, on its members: overrides ``provisioning.className`` for that gang.
CLASS_ANNOTATION = "troupe.io/provisioning-class"

#: A DNS-1123 subdomain: what a class name (``spec.provisioningClassName``) must be.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_KEYS = {"className", "parameters", "namespaceSelector", "preferPreemption"}


@dataclass(frozen=True)
class Expression:
    """One ``matchExpressions`` entry of a label selector (``key``, ``operator`` of
    In/NotIn/Exists/DoesNotExist, ``values``): Kubernetes' LabelSelectorRequirement."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement (as ``metav1.LabelSelectorAsSelector`` reads it)."""
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


@dataclass(frozen=True)
class Provisioning:
    """The validated ``provisioning`` key. ``class_name``: ``spec.provisioningClassName``;
    ``parameters``: ``spec.parameters`` (string to string pairs, sorted: the configuration
    is hashable); ``match_labels`` (pairs likewise) and ``match_expressions``: the namespace
    selector (both empty: every namespace);
    ``prefer_preemption``: when eviction of lower-priority gangs makes room (and
    ``gangPreemptionMode`` is not ``off``), preempt rather than ask."""

    class_name: str = ATOMIC_SCALE_UP
    parameters: tuple[tuple[str, str], ...] = ()
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Expression, ...] = ()
    prefer_preemption: bool = True

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a namespace with ``labels`` is selected (an empty selector selects all)."""
        return (all(labels.get(k) == v for k, v in self.match_labels)
                and all(e.matches(labels) for e in self.match_expressions))


def valid_class(name: Any) -> bool:
    """Whether ``name`` may be a ``provisioningClassName``: a DNS-1123 subdomain of at most 253 characters."""
    return isinstance(name, str) and len(name) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(name))


def _strings(where: str, raw: Any, error: Callable[[str], Exception]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and k and isinstance(v, str) for k, v in raw.items()):
        raise error(f"{where}: must be a mapping of strings to strings, got {raw!r}")
    return dict(raw)


def _expressions(where: str, raw: Any, error: Callable[[str], Exception]) -> tuple[Expression, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise error(f"{where}: must be a list of {{key, operator, values}}, got {raw!r}")
    out = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) - {"key", "operator", "values"}:
            raise error(f"{at}: must be a mapping of key, operator, values, got {entry!r}")
        key, op, values = entry.get("key"), entry.get("operator"), entry.get("values") or []
        if not isinstance(key, str) or not key:
            raise error(f"{at}.key: must be a label key, got {key!r}")
        if op not in _OPERATORS:
            raise error(f"{at}.operator: must be one of {', '.join(_OPERATORS)}, got {op!r}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise error(f"{at}.values: must be a list of strings, got {values!r}")
        if (op in ("In", "NotIn")) != bool(values):
            raise error(f"{at}.values: {op} needs {'some values' if op in ('In', 'NotIn') else 'no values'}, "
                        f"got {values!r}")
        out.append(Expression(key, op, tuple(values)))
    return tuple(out)


def parse(key: str, raw: Any, error: Callable[[str], Exception]) -> Provisioning | None:
    """The ``provisioning`` key ``key`` given as ``raw`` (None or ``{}``: off).

    Raises ``error(message)``, the message naming the field and the value: an unknown
    field, a class that is not a DNS-1123 subdomain, parameters that are not strings (or
    more than 100, or longer than 255 characters: the CRD's limits), a
    selector that is not a label selector, a ``preferPreemption`` that is not a boolean.
    """
    if raw is None or raw == {}:
        return None
    if not isinstance(raw, Mapping):
        raise error(f"{key}: must be a mapping of {', '.join(sorted(_KEYS))}, got {raw!r}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise error(f"{key}.{unknown[0]}: unknown field (known: {', '.join(sorted(_KEYS))})")
    class_name = raw.get("className", ATOMIC_SCALE_UP)
    if not valid_class(class_name):
        raise error(f"{key}.className: must be a provisioning class name (a DNS subdomain such as "
                    f"{ATOMIC_SCALE_UP}), got {class_name!r}")
    prefer = raw.get("preferPreemption", True)
    if not isinstance(prefer, bool):
        raise error(f"{key}.preferPreemption: must be true or false, got {prefer!r}")
    parameters = _strings(f"{key}.parameters", raw.get("parameters"), error)
    long = next((k for k, v in parameters.items() if len(v) > 255), None)
    if len(parameters) > 100 or long is not None:  # the CRD's MaxProperties=100, Parameter MaxLength=255
        raise error(f"{key}.parameters: at most 100, each at most 255 characters (the ProvisioningRequest CRD), got "
                    f"{len(parameters)}" + (f", {long!r} of {len(parameters[long])}" if long else ""))
    selector = raw.get("namespaceSelector") or {}
    if not isinstance(selector, Mapping) or set(selector) - {"matchLabels", "matchExpressions"}:
        raise error(f"{key}.namespaceSelector: must be a label selector (matchLabels, matchExpressions), "
                    f"got {selector!r}")
    return Provisioning(class_name, tuple(sorted(parameters.items())),
                        tuple(sorted(_strings(f"{key}.namespaceSelector.matchLabels", selector.get("matchLabels"),
                                              error).items())),
                        _expressions(f"{key}.namespaceSelector.matchExpressions", selector.get("matchExpressions"),
                                     error), prefer)
