"""Dynamic Resource Allocation's objects, parsed: the devices ResourceSlices publish, the
DeviceClasses' selectors, what ResourceClaims and their templates request and what was
allocated to them (docs/decisions/044-dra.md).

Kubernetes' ``resource.k8s.io/v1`` (GA in 1.34): a DRA driver publishes each node's devices
in ResourceSlices (driver, pool, device name, attributes, capacity); a DeviceClass selects
devices with CEL; a pod asks for devices through ResourceClaims, its own (made by
kube-controller-manager from a ResourceClaimTemplate) or one it shares; kube-scheduler
allocates the devices of a claim on the node it binds the pod to and records them in the
claim's ``status.allocation``.

Here they are read once into plain values (:class:`Catalog`, :func:`catalog`), each bad
field named (:class:`~reconciler.engine.model.fields.ObjectError`); a device's attributes
and capacity become the view CEL selectors read (:mod:`.cel`). Counting them as units, so
that placement, preemption, the simulator and ``kubectl troupe`` plan with DRA devices as
with ``nvidia.com/gpu``, is the ledger's: :mod:`reconciler.engine.ledger.draunits`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine.model import cel
from reconciler.engine.model.fields import ObjectError, item, mapping, path, sequence, string
from reconciler.engine.model.quantity import QuantityError, parse_quantity

#: The DRA kinds read (``resource.k8s.io/v1``), as ``kind`` names them.
KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate")

DeviceKey = tuple[str, str, str]
"""A device's identity: ``(driver, pool, device name)``."""


@dataclass(frozen=True)
class Device:
    """One device of a ResourceSlice: its :data:`DeviceKey` parts, the ``node`` it is on,
    and the :data:`~reconciler.engine.model.cel.DeviceView` selectors read."""

    driver: str
    pool: str
    name: str
    node: str
    view: cel.DeviceView

    @property
    def key(self) -> DeviceKey:
        """``(driver, pool, name)``."""
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True)
class Request:
    """One device request of a claim: ``count`` devices of DeviceClass ``class_name``
    accepted by every one of ``selectors`` (CEL); ``mode`` ``ExactCount`` or ``All``."""

    name: str
    class_name: str
    count: int = 1
    selectors: tuple[str, ...] = ()
    mode: str = "ExactCount"


@dataclass(frozen=True)
class Claim:
    """A ResourceClaim: its ``requests``, the devices allocated to it (``allocated``) and
    the ``node`` they are on (``""`` while unallocated)."""

    namespace: str
    name: str
    requests: tuple[Request, ...] = ()
    allocated: tuple[DeviceKey, ...] = ()
    node: str = ""


@dataclass(frozen=True)
class Catalog:
    """The DRA objects a snapshot counts: ``devices`` (of node-local ResourceSlices),
    ``classes`` (DeviceClass name -> its selectors), ``claims`` and ``templates`` (by
    ``(namespace, name)``; a template's value is its requests)."""

    devices: tuple[Device, ...] = ()
    classes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    claims: Mapping[tuple[str, str], Claim] = field(default_factory=dict)
    templates: Mapping[tuple[str, str], tuple[Request, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.devices or self.classes or self.claims or self.templates)

    @functools.cached_property
    def attribute_names(self) -> frozenset[str]:
        """Every qualified attribute name (``domain/id``) some device has."""
        return frozenset(name for device in self.devices for name, _ in device.view[1])


# --- reading the objects ----------------------------------------------------------------------
def _value(attr: Mapping[str, Any], where: str) -> Any:
    for kind in ("int", "bool", "string", "version"):
        if kind in attr:
            value = attr[kind]
            ok = {"int": isinstance(value, int) and not isinstance(value, bool), "bool": isinstance(value, bool)}
            if (kind in ok and not ok[kind]) or (kind in ("string", "version") and not isinstance(value, str)):
                raise ObjectError(where, f"expected a {kind}, got {value!r}")
            return value
    raise ObjectError(where, "expected one of int, bool, string, version")


def slice_devices(obj: Mapping[str, Any]) -> list[Device]:
    """The devices of a ResourceSlice that names its node (``spec.nodeName``); none for a
    slice of network-attached devices (``nodeSelector``, ``allNodes``), which no one node
    holds. Raises :class:`~reconciler.engine.model.fields.ObjectError` naming the bad field."""
    spec = mapping(obj, "spec", required=True)
    node = string(spec, "nodeName", "spec")
    if not node:
        return []
    driver = string(spec, "driver", "spec", required=True)
    pool = string(mapping(spec, "pool", "spec", required=True), "name", "spec.pool", required=True)
    out = []
    raw = sequence(spec, "devices", "spec")
    for i in range(len(raw)):
        base = path("spec.devices", i)
        device = item(raw, i, "spec.devices")
        name = string(device, "name", base, required=True)
        attrs = {k if "/" in k else f"{driver}/{k}": _value(v if isinstance(v, Mapping) else {}, path(base, "attributes", k))
                 for k, v in mapping(device, "attributes", base).items()}
        capacity = {}
        for k, v in mapping(device, "capacity", base).items():
            try:
                raw_value = v.get("value", "") if isinstance(v, Mapping) else v
                capacity[k if "/" in k else f"{driver}/{k}"] = parse_quantity(raw_value)
            except QuantityError as e:
                raise ObjectError(path(base, "capacity", k, "value"), str(e)) from None
        out.append(Device(driver, pool, name, node, cel.view(driver, attrs, capacity)))
    return out


def device_class(obj: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """A DeviceClass: ``(name, its CEL selectors)``. Raises ``ObjectError``."""
    name = string(mapping(obj, "metadata", required=True), "name", "metadata", required=True)
    return name, _selectors(mapping(obj, "spec"), "spec")


def _selectors(owner: Mapping[str, Any], base: str) -> tuple[str, ...]:
    raw = sequence(owner, "selectors", base)
    out = []
    for i in range(len(raw)):
        selector = item(raw, i, path(base, "selectors"))
        out.append(string(mapping(selector, "cel", path(base, "selectors", i), required=True), "expression",
                          path(base, "selectors", i, "cel"), required=True))
    return tuple(out)


def claim_requests(spec: Mapping[str, Any], base: str = "spec") -> tuple[Request, ...]:
    """The requests of a ResourceClaimSpec (``devices.requests[]``: ``exactly``, or the
    first of ``firstAvailable``). Raises ``ObjectError``."""
    raw = sequence(mapping(spec, "devices", base), "requests", path(base, "devices"))
    out = []
    for i in range(len(raw)):
        where = path(base, "devices.requests", i)
        request = item(raw, i, path(base, "devices.requests"))
        name = string(request, "name", where, required=True)
        exactly = mapping(request, "exactly", where)
        if not exactly:
            first = sequence(request, "firstAvailable", where)
            exactly, where = (item(first, 0, path(where, "firstAvailable")), path(where, "firstAvailable", 0)) \
                if first else ({}, where)
        count = exactly.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ObjectError(path(where, "count"), f"expected a positive integer, got {count!r}")
        out.append(Request(name, string(exactly, "deviceClassName", where, required=True), count,
                           _selectors(exactly, where), string(exactly, "allocationMode", where, default="ExactCount")))
    return tuple(out)


def claim(obj: Mapping[str, Any]) -> Claim:
    """A ResourceClaim: its requests and allocation. Raises ``ObjectError``."""
    meta = mapping(obj, "metadata", required=True)
    allocation = mapping(mapping(obj, "status"), "allocation", "status")
    results = sequence(mapping(allocation, "devices", "status.allocation"), "results", "status.allocation.devices")
    allocated = tuple((string(r, "driver"), string(r, "pool"), string(r, "device"))
                      for r in results if isinstance(r, Mapping))
    return Claim(string(meta, "namespace", "metadata", default="default"), string(meta, "name", "metadata", required=True),
                 claim_requests(mapping(obj, "spec", required=True)), allocated, _allocated_node(allocation))


def _allocated_node(allocation: Mapping[str, Any]) -> str:
    """The node kube-scheduler allocated a claim for: its ``nodeSelector``'s single
    ``metadata.name`` field (or hostname label) value; ``""`` when none."""
    terms = mapping(allocation, "nodeSelector").get("nodeSelectorTerms")
    for term in terms if isinstance(terms, list) else []:
        for key in ("matchFields", "matchExpressions"):
            for req in (term.get(key) or []) if isinstance(term, Mapping) else []:
                values = req.get("values") if isinstance(req, Mapping) else None
                if req.get("key") in ("metadata.name", "kubernetes.io/hostname") and isinstance(values, list) \
                        and len(values) == 1:
                    return str(values[0])
    return ""


def template(obj: Mapping[str, Any]) -> tuple[tuple[str, str], tuple[Request, ...]]:
    """A ResourceClaimTemplate: ``((namespace, name), requests)``. Raises ``ObjectError``."""
    meta = mapping(obj, "metadata", required=True)
    key = (string(meta, "namespace", "metadata", default="default"), string(meta, "name", "metadata", required=True))
    return key, claim_requests(mapping(mapping(obj, "spec", required=True), "spec", "spec", required=True), "spec.spec")


def catalog(objects: Iterable[tuple[str, Mapping[str, Any]]]) -> Catalog:
    """A :class:`Catalog` of ``(kind, object)`` pairs (ResourceSlice, DeviceClass,
    ResourceClaim, ResourceClaimTemplate). Raises ``ObjectError``."""
    devices: list[Device] = []
    classes: dict[str, tuple[str, ...]] = {}
    claims: dict[tuple[str, str], Claim] = {}
    templates: dict[tuple[str, str], tuple[Request, ...]] = {}
    for kind, obj in objects:
        if kind == "ResourceSlice":
            devices.extend(slice_devices(obj))
        elif kind == "DeviceClass":
            name, selectors = device_class(obj)
            classes[name] = selectors
        elif kind == "ResourceClaim":
            c = claim(obj)
            claims[(c.namespace, c.name)] = c
        elif kind == "ResourceClaimTemplate":
            key, requests = template(obj)
            templates[key] = requests
    return Catalog(tuple(devices), classes, claims, templates)



def level_attributes(c: Catalog, levels: Iterable[str]) -> tuple[str, ...]:
    """The ``levels`` (topology level keys) that are device attribute names (``domain/id``,
    as ``gpu.troupe.dev/nvlinkDomain``) of some device of the catalog."""
    return tuple(level for level in levels if level in c.attribute_names)


