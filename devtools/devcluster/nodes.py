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

A topology group yields ``blocks * subblocksPerBlock * hostsPerSubblock`` nodes named
``<name>-b<i>-s<j>-h<k>`` with the GKE topology labels
``cloud.google.com/gce-topology-block = <name>-b<i>``,
``cloud.google.com/gce-topology-subblock = <name>-b<i>-s<j>`` and
``cloud.google.com/gce-topology-host = <name>-b<i>-s<j>-h<k>``. A ``count`` group yields
``<name>-0 .. <name>-<count-1>`` without topology labels.

Every node carries annotation ``kwok.x-k8s.io/node: fake`` (kwok manages only those),
label ``type: kwok`` and ``kubernetes.io/hostname: <node name>``. Plain Node documents get
the annotation added when they lack it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
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


class NodesFileError(ValueError):
    """A nodes file is malformed; the message names the file and the offending field."""


def load(path: str | Path) -> list[dict[str, Any]]:
    """Read a nodes file (compact or plain Node YAML) and return Node objects as dicts.

    Raises :class:`NodesFileError` (naming the file) when it is unreadable, not YAML, has
    no nodes, has a document that is neither ``FakeNodes`` nor ``Node``, or repeats a name.
    """
    path = Path(path)
    try:
        docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    except OSError as err:
        raise NodesFileError(f"{path}: cannot read nodes file: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise NodesFileError(f"{path}: not valid YAML at {yaml_error(err)}") from err
    try:
        return expand_documents(docs)
    except NodesFileError as err:
        raise NodesFileError(f"{path}: {err}") from err


def expand_documents(docs: Iterable[Any]) -> list[dict[str, Any]]:
    """Expand parsed YAML documents into Node objects (see module docstring for the format)."""
    nodes: list[dict[str, Any]] = []
    for index, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise NodesFileError(f"document {index} is a {type(doc).__name__}, not a mapping")
        kind = doc.get("kind")
        if kind == COMPACT_KIND:
            nodes.extend(expand(doc))
        elif kind == "Node":
            nodes.append(_plain_node(doc, f"document {index}"))
        elif kind == "List":
            for item_index, item in enumerate(doc.get("items") or []):
                nodes.append(_plain_node(item, f"document {index} items[{item_index}]"))
        else:
            raise NodesFileError(
                f"document {index} has kind {kind!r}; expected {COMPACT_KIND!r}, 'Node' or 'List'"
            )
    if not nodes:
        raise NodesFileError("no nodes defined")
    seen: set[str] = set()
    for node in nodes:
        name = node["metadata"]["name"]
        if name in seen:
            raise NodesFileError(f"node name {name!r} appears twice")
        seen.add(name)
    return nodes


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
    groups = spec.get("groups")
    if not isinstance(groups, list) or not groups:
        raise NodesFileError(f"{COMPACT_KIND} needs a non-empty list 'groups'")
    nodes: list[dict[str, Any]] = []
    for index, group in enumerate(groups):
        where = f"groups[{index}]"
        if not isinstance(group, Mapping):
            raise NodesFileError(f"{where} is not a mapping")
        name = group.get("name")
        if not isinstance(name, str) or not name:
            raise NodesFileError(f"{where}.name must be a non-empty string")
        resources = {
            str(k): str(v) for k, v in (group.get("resources") or _DEFAULT_RESOURCES).items()
        }
        labels = {str(k): str(v) for k, v in (group.get("labels") or {}).items()}
        taints = list(group.get("taints") or [])
        topology = group.get("topology")
        if topology is not None:
            if not isinstance(topology, Mapping):
                raise NodesFileError(f"{where}.topology must be a mapping")
            blocks = _positive(topology, "blocks", f"{where}.topology")
            subblocks = _positive(topology, "subblocksPerBlock", f"{where}.topology")
            hosts = _positive(topology, "hostsPerSubblock", f"{where}.topology")
            for b in range(blocks):
                for s in range(subblocks):
                    for h in range(hosts):
                        block = f"{name}-b{b}"
                        subblock = f"{block}-s{s}"
                        host = f"{subblock}-h{h}"
                        topo = {BLOCK_LABEL: block, SUBBLOCK_LABEL: subblock, HOST_LABEL: host}
                        nodes.append(make_node(host, resources, {**labels, **topo}, taints))
        else:
            count = _positive(group, "count", where)
            for i in range(count):
                nodes.append(make_node(f"{name}-{i}", resources, labels, taints))
    return nodes


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
