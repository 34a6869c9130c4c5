"""Reading snapshots: JSON by orjson, YAML by libyaml's C loader (the pure Python loader
without it), the format told by name or by the first character, and errors naming the
source, the format, the line and the column."""

from __future__ import annotations

import json

import pytest
import yaml

from reconciler.objects import snapshot_io
from reconciler.objects.snapshot_io import (
    InputError,
    load_documents,
    read_file,
    read_objects,
    snapshot_format,
    yaml_loader,
)
from reconciler.tools import simulate
from testbed.engine_builders import make_node, make_pod

NODE = make_node("a1").topology("b1", "s1", "a1").allocatable(gpu=8).build()
POD = make_pod("w-0", "ml").requests(gpu=8).gang("g", 1).gated().build()


def no_yaml(*args, **kwargs):
    raise AssertionError("read as YAML")


# --- JSON -------------------------------------------------------------------------------------
def test_a_json_list_is_read_as_json_and_unpacked(monkeypatch):
    monkeypatch.setattr(yaml, "load_all", no_yaml)
    data = json.dumps({"apiVersion": "v1", "kind": "List", "items": [NODE, POD]}, indent=4).encode()
    assert read_objects(data, "snapshot") == [
        ("snapshot: document 1 item 0", "Node", NODE),
        ("snapshot: document 1 item 1", "Pod", POD),
    ]


def test_a_single_json_object_is_one_document(monkeypatch):
    monkeypatch.setattr(yaml, "load_all", no_yaml)
    assert read_objects(b"\n  " + json.dumps(NODE).encode(), "<stdin>") == [("<stdin>: document 1", "Node", NODE)]


def test_concatenated_json_objects_are_documents_in_order(monkeypatch):
    monkeypatch.setattr(yaml, "load_all", no_yaml)
    data = (json.dumps(NODE) + "\n" + json.dumps(POD) + json.dumps({"kind": "NodeList", "items": [NODE]})).encode()
    assert [(where, kind) for where, kind, _ in read_objects(data, "s.json")] == [
        ("s.json: document 1", "Node"), ("s.json: document 2", "Pod"), ("s.json: document 3 item 0", "Node"),
    ]


def test_a_file_named_json_is_json_whatever_it_starts_with():
    assert snapshot_format(b'"just a string"', "snap.JSON") == "json"
    assert snapshot_format(b"\xef\xbb\xbf \n{}", "snap") == "json"
    assert snapshot_format(b"  [1]", "-") == "json"
    assert snapshot_format(b"kind: List\n", "snap") == "yaml"
    assert snapshot_format(b"", "snap") == "yaml"
    with pytest.raises(InputError, match=r"^snap\.json: document 1: expected a Kubernetes object, got a str$"):
        read_objects(b'"just a string"', "snap.json")


def test_a_json_syntax_error_names_the_source_the_line_and_the_column():
    data = b'{\n  "kind": "List",\n  "items": [\n    {"kind": "Node",}\n  ]\n}\n'
    with pytest.raises(InputError) as e:
        read_objects(data, "snapshot.json")
    assert str(e.value).startswith("snapshot.json: not valid JSON at line 4, column 20: trailing comma")


def test_an_error_in_a_later_document_of_a_json_stream_is_placed_there():
    data = b'{"kind": "Node"}\n{"kind": "Pod"}\n{"kind": \n'
    with pytest.raises(InputError, match=r"^s\.json: not valid JSON at line 4, column 1: "):
        read_objects(data, "s.json")


def test_json_that_is_not_utf8_says_where():
    with pytest.raises(InputError, match=r"^s\.json: not valid JSON: not UTF-8 text at line 2, column 11$"):
        read_objects(b'{"kind":\n "Node", "\xff": 1}', "s.json")


def test_content_that_looks_like_json_but_is_flow_yaml_is_read_as_yaml():
    assert read_objects(b"{kind: Node, metadata: {name: a1}}\n", "snapshot") == [
        ("snapshot: document 1", "Node", {"kind": "Node", "metadata": {"name": "a1"}})]
    with pytest.raises(InputError, match=r"^snapshot\.json: not valid JSON at line 1, column 2: "):
        read_objects(b"{kind: Node, metadata: {name: a1}}\n", "snapshot.json")


def test_content_that_is_neither_gives_the_json_error():
    with pytest.raises(InputError, match=r"^snapshot: not valid JSON at line 2, column \d+: "):
        read_objects(b'{"kind": "Node",\n "x": [}\n', "snapshot")


# --- YAML -------------------------------------------------------------------------------------
def test_a_yaml_syntax_error_names_the_source_the_line_and_the_column():
    with pytest.raises(InputError) as e:
        read_objects(b"kind: List\nitems:\n- kind: Node\n  metadata: {name: a1\n", "snapshot.yaml")
    assert str(e.value).startswith("snapshot.yaml: not valid YAML at line 5, column 1: ")


def test_yaml_that_is_not_utf8_says_where():
    with pytest.raises(InputError, match=r"^s\.yaml: not valid YAML: not UTF-8 text at line 2, column 7$"):
        read_objects(b"kind: Node\nname: \xff\n", "s.yaml")


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_yaml_is_read_with_libyamls_c_loader_when_present(monkeypatch):
    assert yaml_loader() is yaml.CSafeLoader
    used = []
    real = yaml.load_all

    def load_all(stream, Loader):
        used.append(Loader)
        return real(stream, Loader=Loader)

    monkeypatch.setattr(yaml, "load_all", load_all)
    assert [kind for _, kind, _ in read_objects(yaml.safe_dump_all([NODE, POD]).encode(), "s.yaml")] == ["Node", "Pod"]
    assert used == [yaml.CSafeLoader]


def test_without_libyaml_the_pure_python_loader_reads_the_same(monkeypatch):
    data = yaml.safe_dump({"kind": "List", "items": [NODE, POD]}).encode()
    fast = read_objects(data, "s.yaml")
    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    assert yaml_loader() is yaml.SafeLoader
    assert read_objects(data, "s.yaml") == fast
    with pytest.raises(InputError, match=r"^s\.yaml: not valid YAML at line 2, column 1: "):
        read_objects(b"a: [1,\n", "s.yaml")


def test_empty_input_has_no_objects():
    assert read_objects(b"", "s") == []
    assert read_objects(b"  \n", "s.json") == []
    assert read_objects(b"---\n---\n", "s.yaml") == []


def test_text_is_read_as_its_utf8_bytes():
    assert load_documents(b"kind: Node\n", "s") == [{"kind": "Node"}]
    assert read_objects("kind: Node\nmetadata: {name: é}\n", "s")[0][2]["metadata"]["name"] == "é"


def test_the_simulator_reads_through_this_module():
    assert simulate.read_retained is snapshot_io.read_retained
    assert simulate.InputError is snapshot_io.InputError


def test_a_file_is_mapped_and_read_in_place(tmp_path, monkeypatch):
    monkeypatch.setattr(yaml, "load_all", no_yaml)
    path = tmp_path / "snapshot"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"kind": "List", "items": [NODE]}).encode())
    data = read_file(str(path))
    assert isinstance(data, memoryview)
    assert read_objects(data, "snapshot") == [("snapshot: document 1 item 0", "Node", NODE)]
    (tmp_path / "empty.json").write_bytes(b"")
    assert read_file(str(tmp_path / "empty.json")) == b""
    with pytest.raises(OSError):
        read_file(str(tmp_path / "absent"))


def test_a_mapped_yaml_file_is_read_by_the_yaml_loader(tmp_path):
    path = tmp_path / "snapshot.yaml"
    path.write_bytes(yaml.safe_dump_all([NODE, POD]).encode())
    assert [kind for _, kind, _ in read_objects(read_file(str(path)), "snapshot.yaml")] == ["Node", "Pod"]
    path.write_bytes(b"kind: Node\nname: \xff\n")
    with pytest.raises(InputError, match=r"not UTF-8 text at line 2, column 7$"):
        read_objects(read_file(str(path)), "snapshot.yaml")
