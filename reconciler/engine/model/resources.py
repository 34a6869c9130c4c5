"""Resource arithmetic: what a pod requests and what a node offers, in kube-scheduler's units.

A resource vector is a ``dict`` from resource name to an integer: millicores for ``cpu``,
whole units (bytes, devices, pods) for everything else (see :mod:`.quantity`).

A pod's request is computed as kube-scheduler computes it (``resourcehelper.PodRequests``
in ``k8s.io/component-helpers``):

- the regular containers are summed;
- restartable init containers (sidecars, ``restartPolicy: Always``) are added to that sum,
  and each later init container is counted together with the sidecars started before it;
- the result is the maximum of that sum and the largest init container step;
- pod-level requests (``spec.resources``, for ``cpu``, ``memory`` and ``hugepages-*``)
  replace the container aggregate for those resources;
- ``spec.overhead`` (RuntimeClass) is added.

As the API server defaults them, a container's limits stand in for requests it does not
state. Sums are exact (fractions) and rounded to units once, at the end, as Kubernetes
adds ``Quantity`` values and then takes ``MilliValue``/``Value``. Every pod also asks for
one unit of ``pods`` (the node's pod-count limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from reconciler.engine.model.fields import ObjectError, mapping, path, sequence, string
from reconciler.engine.model.quantity import CPU, QuantityError, parse_quantity, to_units

#: The pod-count resource every pod uses one of.
PODS = "pods"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
#: kubelet's default ``maxPods``: a node whose ``allocatable`` omits ``pods`` gets this.
DEFAULT_MAX_PODS = 110

Exact = dict[str, Fraction]


def resource_list(obj: Mapping[str, Any], key: str, base: str) -> Exact:
    """``obj[key]`` (a ResourceList such as ``requests``) parsed exactly."""
    raw = mapping(obj, key, base)
    out: Exact = {}
    for name, value in raw.items():
        try:
            out[name if type(name) is str else str(name)] = parse_quantity(value)
        except QuantityError as e:
            raise ObjectError(path(base, key, str(name)), str(e)) from None
    return out


def _requests_of(resources_owner: Mapping[str, Any]) -> Exact:
    """``resources.requests``, with ``resources.limits`` standing in for unstated
    requests. Errors name fields from ``resources`` on."""
    res = resources_owner.get("resources")
    if res is None or (type(res) is dict and not res):  # nothing requested; anything else is checked below
        return {}
    res = mapping(resources_owner, "resources")
    requests = resource_list(res, "requests", "resources")
    if res.get("limits"):
        for name, value in resource_list(res, "limits", "resources").items():
            requests.setdefault(name, value)
    else:
        mapping(res, "limits", "resources")  # null or empty; anything else is refused
    return requests


def _container_requests(container: Any) -> Exact:
    if type(container) is not dict and not isinstance(container, Mapping):
        raise ObjectError("", f"expected a mapping, got {type(container).__name__}")
    return _requests_of(container)


def _add(into: Exact, other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        current = into.get(name)
        into[name] = value if current is None else current + value


def _max(into: Exact, other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        current = into.get(name)
        if value > (0 if current is None else current):
            into[name] = value


def _is_pod_level(name: str) -> bool:
    return name in (CPU, MEMORY) or name.startswith("hugepages-")


def pod_requests_exact(spec: Mapping[str, Any], base: str = "spec") -> Exact:
    """The pod's effective requests, exact; see the module docstring for the rules."""
    containers = sequence(spec, "containers", base, required=True)
    reqs: Exact = {}
    for i, container in enumerate(containers):
        try:
            _add(reqs, _container_requests(container))
        except ObjectError as e:
            raise e.below(path(base, "containers", i)) from None
    inits = sequence(spec, "initContainers", base)
    if inits:
        sidecars: Exact = {}
        init_peak: Exact = {}
        for i, container in enumerate(inits):
            try:
                step = _container_requests(container)
                sidecar = string(container, "restartPolicy") == "Always"
            except ObjectError as e:
                raise e.below(path(base, "initContainers", i)) from None
            if sidecar:
                _add(reqs, step)
                _add(sidecars, step)
                step = dict(sidecars)
            else:
                _add(step, sidecars)
            _max(init_peak, step)
        _max(reqs, init_peak)
    try:
        pod_level = _requests_of(spec)
    except ObjectError as e:
        raise e.below(base) from None
    for name, value in pod_level.items():
        if _is_pod_level(name):
            reqs[name] = value
    if spec.get("overhead") is not None:
        _add(reqs, resource_list(spec, "overhead", base))
    return reqs


def to_vector(exact: Mapping[str, Fraction]) -> dict[str, int]:
    """Exact amounts in kube-scheduler's integer units; zero amounts are dropped."""
    out = {name: to_units(name, value) for name, value in exact.items()}
    return {name: units for name, units in sorted(out.items()) if units != 0}


def pod_requests(spec: Mapping[str, Any], base: str = "spec") -> dict[str, int]:
    """The pod's request vector in units, including one ``pods``."""
    vector = to_vector(pod_requests_exact(spec, base))
    vector[PODS] = 1
    return dict(sorted(vector.items()))


def node_allocatable(status: Mapping[str, Any], base: str = "status") -> dict[str, int]:
    """``status.allocatable`` in units (``pods`` defaults to kubelet's 110 when absent).

    Raises :class:`ObjectError` when ``allocatable`` is missing: a node that states no
    capacity cannot be planned on, and a snapshot without it is most likely cut short.
    """
    mapping(status, "allocatable", base, required=True)
    units = {name: to_units(name, value) for name, value in resource_list(status, "allocatable", base).items()}
    units.setdefault(PODS, DEFAULT_MAX_PODS)
    return dict(sorted(units.items()))


def resource_order(name: str) -> tuple[int, str]:
    """Sort key listing resources as kube-scheduler reports them: cpu, memory,
    ephemeral-storage, pods, then extended resources by name."""
    fixed = {CPU: 0, MEMORY: 1, EPHEMERAL_STORAGE: 2, PODS: 3}
    return (fixed.get(name, 4), name)
