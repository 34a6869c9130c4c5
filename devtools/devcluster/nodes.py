"""Fake (kwok) nodes from a compact, declarative file.

A nodes file is either a *compact* document (``kind: FakeNodes``) listing node groups,
which :func:`expand` turns into Node objects, or a plain (multi-document) YAML of Node
objects (a ``kind: List`` of them works too). See ``examples/nodes.yaml``.

Compact format::

    apiVersion: troupe.dev/devcluster/v1
    kind: FakeNodes
    groups:
      - name: gpu                 # node names start with this
        topology:                 # optional; without it give `count: N`
          blocks: 2
          subblocksPerBlock: 2
          hostsPerSubblock: 4
        resources:                # allocatable == capacity
          cpu: "32"
          memory: 256Gi
          pods: "110"
          nvidia.com/gpu: "8"
        labels: {}                # optional, added to every node of the group
        taints: []                # optional, Node spec.taints
        draDevices:               # optional: fake DRA devices, one ResourceSlice per node
          driver: gpu.troupe.dev  # default; a DNS subdomain, the DeviceClass's name too
          count: 8                # devices gpu-0 .. gpu-7 per node (1 to 128)
          attributes:             # optional, on every device: string, int or bool, or
            model: H100-SXM5-80GB #   a typed value such as {version: 1.2.3}
          capacity:               # optional, on every device: name -> quantity
            memory: 80Gi

A topology group yields ``blocks * subblocksPerBlock * hostsPerSubblock`` nodes named
``<name>-b<i>-s<j>-h<k>`` with the GKE topology labels
``cloud.google.com/gce-topology-block = <name>-b<i>``,
``cloud.google.com/gce-topology-subblock = <name>-b<i>-s<j>`` and
``cloud.google.com/gce-topology-host = <name>-b<i>-s<j>-h<k>``. A ``count`` group yields
``<name>-0 .. <name>-<count-1>`` without topology labels.

A group with ``draDevices`` keeps its ``resources`` (give no ``nvidia.com/gpu`` there for
nodes whose GPUs are DRA devices only); what is published for it, and the topology
attributes added to every device, is in ``dra.py``. :func:`load_file` returns the devices
of each node beside the nodes; :func:`load` the nodes alone.

Every node carries annotation ``kwok.x-k8s.io/node: fake`` (kwok manages only those),
label ``type: kwok`` and ``kubernetes.io/hostname: <node name>``. Plain Node documents get
the annotation added when they lack it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from troupe.cli import yaml_error

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
BLOCK_LABEL = "cloud.google.com/gce-topology-block"
SUBBLOCK_LABEL = "cloud.google.com/gce-topology-subblock"
HOST_LABEL = "cloud.google.com/gce-topology-host"
HOSTNAME_LABEL = "kubernetes.io/hostname"

COMPACT_KIND = "FakeNodes"

_DEFAULT_RESOURCES = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}

#: The driver of ``draDevices`` that name none (and the name of its DeviceClass).
DEFAULT_DRA_DRIVER = "gpu.troupe.dev"
#: The most devices one ResourceSlice may list (resource.k8s.io/v1 validation).
MAX_DEVICES_PER_SLICE = 128
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_ATTRIBUTE_TYPES = frozenset({"string", "int", "bool", "version"})


class NodesFileError(ValueError):
    """A nodes file is malformed; the message names the file and the offending field."""


@dataclass(frozen=True)
class FakeDevices:
    """The ``draDevices`` of a node group: ``count`` devices of ``driver`` on each of its nodes.

    ``attributes``: name -> typed value as a ResourceSlice spells it (``{"string": "H100"}``,
    ``{"int": 2}``, ``{"bool": true}``, ``{"version": "1.2.3"}``), the same on every device.
    ``capacity``: name -> quantity string (``"80Gi"``), the same on every device.
    """

    driver: str
    count: int
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodesFile:
    """What a nodes file defines: its Node objects, in file order, and the fake DRA devices
    of each node that has some (node name -> :class:`FakeDevices`; others are absent)."""

    nodes: list[dict[str, Any]]
    devices: dict[str, FakeDevices] = field(default_factory=dict)


def load(path: str | Path) -> list[dict[str, Any]]:
    """Read a nodes file (compact or plain Node YAML) and return Node objects as dicts.

    Raises :class:`NodesFileError` (naming the file) when it is unreadable, not YAML, has
    no nodes, has a document that is neither ``FakeNodes`` nor ``Node``, or repeats a name.
    """
    return load_file(path).nodes


def load_file(path: str | Path) -> NodesFile:
    """Read a nodes file: its Node objects and the fake DRA devices of its nodes.

    Raises :class:`NodesFileError` as :func:`load` does, and for a bad ``draDevices``.
    """
    path = Path(path)
    try:
        docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    except OSError as err:
        raise NodesFileError(f"{path}: cannot read nodes file: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise NodesFileError(f"{path}: not valid YAML at {yaml_error(err)}") from err
    try:
        return read_documents(docs)
    except NodesFileError as err:
        raise NodesFileError(f"{path}: {err}") from err


def expand_documents(docs: Iterable[Any]) -> list[dict[str, Any]]:
    """Expand parsed YAML documents into Node objects (see module docstring for the format)."""
    return read_documents(docs).nodes


def read_documents(docs: Iterable[Any]) -> NodesFile:
    """Expand parsed YAML documents into Node objects and their fake DRA devices.

    Raises :class:`NodesFileError` naming the document or field at fault.
    """
    result = NodesFile([])
    for index, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise NodesFileError(f"document {index} is a {type(doc).__name__}, not a mapping")
        kind = doc.get("kind")
        if kind == COMPACT_KIND:
            expanded = expand_file(doc)
            result.nodes.extend(expanded.nodes)
            result.devices.update(expanded.devices)
        elif kind == "Node":
            result.nodes.append(_plain_node(doc, f"document {index}"))
        elif kind == "List":
            for item_index, item in enumerate(doc.get("items") or []):
                result.nodes.append(_plain_node(item, f"document {index} items[{item_index}]"))
        else:
            raise NodesFileError(
                f"document {index} has kind {kind!r}; expected {COMPACT_KIND!r}, 'Node' or 'List'"
            )
    if not result.nodes:
        raise NodesFileError("no nodes defined")
    seen: set[str] = set()
    for node in result.nodes:
        name = node["metadata"]["name"]
        if name in seen:
            raise NodesFileError(f"node name {name!r} appears twice")
        seen.add(name)
    return result


def _plain_node(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, Mapping) or doc.get("kind") != "Node":
        raise NodesFileError(f"{where} is not a Node")
    node = copy.deepcopy(dict(doc))
    metadata = node.setdefault("metadata", {})
    if not metadata.get("name"):
        raise NodesFileError(f"{where} has no metadata.name")
    node.setdefault("apiVersion", "v1")
    annotations = metadata.get("annotations") or {}
    annotations.setdefault(KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE)
    metadata["annotations"] = annotations
    return node


def expand(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Expand one compact ``FakeNodes`` document into Node objects, in a stable order.

    Order: groups as listed; within a topology group block, subblock, host ascending.
    Raises :class:`NodesFileError` naming the field (``groups[0].topology.blocks``) that
    is missing or not a positive integer.
    """
    return expand_file(spec).nodes


def expand_file(spec: Mapping[str, Any]) -> NodesFile:
    """Expand one compact ``FakeNodes`` document into Node objects (as :func:`expand`) and
    the fake DRA devices of the nodes of each group with ``draDevices``."""
    groups = spec.get("groups")
    if not isinstance(groups, list) or not groups:
        raise NodesFileError(f"{COMPACT_KIND} needs a non-empty list 'groups'")
    result = NodesFile([])
    for index, group in enumerate(groups):
        where = f"groups[{index}]"
        if not isinstance(group, Mapping):
            raise NodesFileError(f"{where} is not a mapping")
        nodes = _group_nodes(group, where)
        result.nodes.extend(nodes)
        if group.get("draDevices") is not None:
            devices = parse_devices(group["draDevices"], f"{where}.draDevices")
            result.devices.update((node["metadata"]["name"], devices) for node in nodes)
    return result


def _group_nodes(group: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    name = group.get("name")
    if not isinstance(name, str) or not name:
        raise NodesFileError(f"{where}.name must be a non-empty string")
    resources = {str(k): str(v) for k, v in (group.get("resources") or _DEFAULT_RESOURCES).items()}
    labels = {str(k): str(v) for k, v in (group.get("labels") or {}).items()}
    taints = list(group.get("taints") or [])
    topology = group.get("topology")
    if topology is None:
        count = _positive(group, "count", where)
        return [make_node(f"{name}-{i}", resources, labels, taints) for i in range(count)]
    if not isinstance(topology, Mapping):
        raise NodesFileError(f"{where}.topology must be a mapping")
    blocks = _positive(topology, "blocks", f"{where}.topology")
    subblocks = _positive(topology, "subblocksPerBlock", f"{where}.topology")
    hosts = _positive(topology, "hostsPerSubblock", f"{where}.topology")
    nodes = []
    for b in range(blocks):
        for s in range(subblocks):
            for h in range(hosts):
                block = f"{name}-b{b}"
                subblock = f"{block}-s{s}"
                host = f"{subblock}-h{h}"
                topo = {BLOCK_LABEL: block, SUBBLOCK_LABEL: subblock, HOST_LABEL: host}
                nodes.append(make_node(host, resources, {**labels, **topo}, taints))
    return nodes


def parse_devices(section: Any, where: str = "draDevices") -> FakeDevices:
    """A ``draDevices`` section (``{driver, count, attributes, capacity}``, see the module
    docstring) as :class:`FakeDevices`. Plain attribute values are typed by their YAML type
    (string, int, bool); a one-key mapping (``{version: 1.2.3}``) is kept as it is.

    Raises :class:`NodesFileError` naming the field at fault (``where``-prefixed).
    """
    if not isinstance(section, Mapping):
        raise NodesFileError(f"{where} must be a mapping")
    unknown = set(section) - {"driver", "count", "attributes", "capacity"}
    if unknown:
        raise NodesFileError(f"{where} has unknown keys {sorted(unknown)}")
    driver = section.get("driver", DEFAULT_DRA_DRIVER)
    if not isinstance(driver, str) or not _DNS_SUBDOMAIN.fullmatch(driver):
        raise NodesFileError(f"{where}.driver must be a lower-case DNS subdomain, got {driver!r}")
    count = _positive(section, "count", where)
    if count > MAX_DEVICES_PER_SLICE:
        raise NodesFileError(f"{where}.count must be at most {MAX_DEVICES_PER_SLICE}, got {count}")
    attributes = {}
    for name, value in _mapping(section, "attributes", where).items():
        attributes[str(name)] = _typed_attribute(value, f"{where}.attributes.{name}")
    capacity = {str(k): str(v) for k, v in _mapping(section, "capacity", where).items()}
    return FakeDevices(driver, count, attributes, capacity)


def _mapping(section: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = section.get(key) or {}
    if not isinstance(value, Mapping):
        raise NodesFileError(f"{where}.{key} must be a mapping")
    return value


def _typed_attribute(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"string": value}
    if isinstance(value, Mapping) and len(value) == 1 and set(value) <= _ATTRIBUTE_TYPES:
        return dict(value)
    raise NodesFileError(
        f"{where} must be a string, an int, a bool or one of {sorted(_ATTRIBUTE_TYPES)}: value, got {value!r}"
    )


def _positive(mapping: Mapping[str, Any], key: str, where: str) -> int:
    value = mapping.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise NodesFileError(f"{where}.{key} must be a positive integer, got {value!r}")
    return value


def make_node(
    name: str,
    resources: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
    taints: list[Any] | None = None,
) -> dict[str, Any]:
    """One kwok-managed Node object; allocatable and capacity are both ``resources``."""
    node_labels = {
        "type": "kwok",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        HOSTNAME_LABEL: name,
        **(labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": node_labels,
        },
        "spec": {"taints": copy.deepcopy(taints)} if taints else {},
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }
