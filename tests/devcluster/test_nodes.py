"""Expansion of nodes files (compact FakeNodes groups and plain Node YAML) into Node objects."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import yaml

from devtools.devcluster import nodes

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nodes.yaml"


def test_the_example_file_expands_to_2_blocks_of_2_subblocks_of_4_hosts():
    got = nodes.load(EXAMPLE)

    assert len(got) == 16
    blocks = collections.Counter(n["metadata"]["labels"][nodes.BLOCK_LABEL] for n in got)
    subblocks = collections.Counter(n["metadata"]["labels"][nodes.SUBBLOCK_LABEL] for n in got)
    hosts = {n["metadata"]["labels"][nodes.HOST_LABEL] for n in got}
    assert blocks == {"gpu-b0": 8, "gpu-b1": 8}
    assert subblocks == {"gpu-b0-s0": 4, "gpu-b0-s1": 4, "gpu-b1-s0": 4, "gpu-b1-s1": 4}
    assert len(hosts) == 16


def test_every_example_node_is_a_kwok_node_with_32_cpu_256gi_110_pods_8_gpus_and_no_taints():
    want_resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
    for node in nodes.load(EXAMPLE):
        name = node["metadata"]["name"]
        assert node["apiVersion"] == "v1" and node["kind"] == "Node"
        assert node["metadata"]["annotations"][nodes.KWOK_ANNOTATION] == "fake"
        assert node["metadata"]["labels"]["type"] == "kwok"
        assert node["metadata"]["labels"][nodes.HOSTNAME_LABEL] == name
        assert node["status"]["allocatable"] == want_resources
        assert node["status"]["capacity"] == want_resources
        assert not node["spec"].get("taints")


def test_node_names_and_topology_labels_nest_block_then_subblock_then_host():
    got = nodes.load(EXAMPLE)
    first, last = got[0], got[-1]

    assert first["metadata"]["name"] == "gpu-b0-s0-h0"
    assert last["metadata"]["name"] == "gpu-b1-s1-h3"
    assert last["metadata"]["labels"] == {
        "type": "kwok",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": "gpu-b1-s1-h3",
        nodes.BLOCK_LABEL: "gpu-b1",
        nodes.SUBBLOCK_LABEL: "gpu-b1-s1",
        nodes.HOST_LABEL: "gpu-b1-s1-h3",
    }


def test_a_count_group_makes_numbered_nodes_with_group_labels_and_taints_but_no_topology():
    taint = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
    got = nodes.expand(
        {
            "kind": "FakeNodes",
            "groups": [
                {
                    "name": "cpu",
                    "count": 3,
                    "resources": {"cpu": 4, "memory": "16Gi", "pods": 110},
                    "labels": {"pool": "cpu"},
                    "taints": [taint],
                },
            ],
        }
    )

    assert [n["metadata"]["name"] for n in got] == ["cpu-0", "cpu-1", "cpu-2"]
    assert got[0]["status"]["allocatable"] == {"cpu": "4", "memory": "16Gi", "pods": "110"}
    assert got[0]["metadata"]["labels"]["pool"] == "cpu"
    assert nodes.BLOCK_LABEL not in got[0]["metadata"]["labels"]
    assert got[2]["spec"]["taints"] == [taint]


def test_plain_node_yaml_is_passed_through_with_the_kwok_annotation_added(tmp_path):
    path = tmp_path / "nodes.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: a\n  labels: {x: y}\n"
        "---\n"
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: b\n  annotations: {kwok.x-k8s.io/node: fake, k: v}\n"
    )

    got = nodes.load(path)

    assert [n["metadata"]["name"] for n in got] == ["a", "b"]
    assert got[0]["metadata"]["labels"] == {"x": "y"}
    assert got[0]["metadata"]["annotations"] == {nodes.KWOK_ANNOTATION: "fake"}
    assert got[1]["metadata"]["annotations"] == {nodes.KWOK_ANNOTATION: "fake", "k": "v"}


def test_a_kubectl_list_of_nodes_is_accepted(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}],
            }
        )
    )

    assert [n["metadata"]["name"] for n in nodes.load(path)] == ["n1"]


@pytest.mark.parametrize(
    ("text", "want_error"),
    [
        ("kind: FakeNodes\ngroups: []\n", "non-empty list 'groups'"),
        (
            "kind: FakeNodes\ngroups:\n- name: g\n  topology: {blocks: 2, subblocksPerBlock: 0, hostsPerSubblock: 1}\n",
            "groups[0].topology.subblocksPerBlock must be a positive integer, got 0",
        ),
        (
            "kind: FakeNodes\ngroups:\n- name: g\n",
            "groups[0].count must be a positive integer, got None",
        ),
        ("kind: FakeNodes\ngroups:\n- count: 2\n", "groups[0].name must be a non-empty string"),
        ("kind: Pod\nmetadata: {name: p}\n", "document 0 has kind 'Pod'"),
        ("kind: Node\nmetadata: {}\n", "document 0 has no metadata.name"),
        (
            "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: a}\n",
            "node name 'a' appears twice",
        ),
        ("", "no nodes defined"),
        ("kind: [unclosed\n", "not valid YAML"),
    ],
    ids=[
        "no groups",
        "zero subblocks",
        "no count or topology",
        "no name",
        "not a node",
        "nameless node",
        "duplicate name",
        "empty file",
        "bad yaml",
    ],
)
def test_a_bad_nodes_file_is_rejected_with_an_error_naming_the_file_and_field(
    tmp_path, text, want_error
):
    path = tmp_path / "bad.yaml"
    path.write_text(text)

    with pytest.raises(nodes.NodesFileError) as caught:
        nodes.load(path)

    assert str(path) in str(caught.value)
    assert want_error in str(caught.value)


def test_a_missing_nodes_file_is_named_in_the_error(tmp_path):
    with pytest.raises(nodes.NodesFileError, match=r"missing\.yaml: cannot read nodes file"):
        nodes.load(tmp_path / "missing.yaml")
