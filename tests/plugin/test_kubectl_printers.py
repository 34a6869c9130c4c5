"""``kubectl troupe``'s output is kubectl's: a ``List`` of ``Gang`` objects for ``-o json|yaml``,
``gang.troupe.io/<object name>`` for ``-o name``, kubectl's ``-o jsonpath=`` and
``-o custom-columns=``, ``--no-headers``, data on stdout and messages on stderr
(docs/decisions/052-kubectl-conventions.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from reconciler.tools import plugin, printers

REPO = Path(__file__).resolve().parents[2]
#: examples/snapshot.json holds gangs whose names are no object names (pod:llm-big-0, job:finetune).
EXAMPLE = str(REPO / "examples" / "snapshot.json")
NOW = "2026-11-23T12:08:44Z"


def run(capsys, *argv, code=0) -> tuple[str, str]:
    got = plugin.main([*argv, "--snapshot", EXAMPLE, "--now", NOW])
    out, err = capsys.readouterr()
    assert got == code, err
    return out, err


def test_json_is_kubectls_list_of_gang_objects_named_as_the_reconciler_names_them(capsys):
    listed = json.loads(run(capsys, "status", "-A", "-o", "json")[0])
    assert {k: listed[k] for k in ("apiVersion", "kind", "metadata")} == {
        "apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}}
    items = {(i["metadata"]["namespace"], i["spec"]["gangName"]): i for i in listed["items"]}
    assert {(i["apiVersion"], i["kind"]) for i in listed["items"]} == {("troupe.io/v1alpha1", "Gang")}
    assert items["ml", "urgent"]["metadata"]["name"] == "urgent"
    hashed = items["infer", "pod:llm-big-0"]["metadata"]["name"]
    assert re.fullmatch(r"pod-llm-big-0-[0-9a-f]{16}", hashed), hashed  # gangobject.object_name's hash
    urgent = items["ml", "urgent"]["status"]
    assert (urgent["phase"], urgent["queuePosition"], urgent["members"]["present"]) == ("Unschedulable", 1, 8)
    assert "namespace" not in urgent and "name" not in urgent  # in metadata and spec, as an object's
    assert yaml.safe_load(run(capsys, "status", "-A", "-o", "yaml")[0]) == listed


def test_name_is_the_gang_objects_resource_and_name_as_kubectl_get_takes_it(capsys):
    names = run(capsys, "status", "-A", "-o", "name")[0].splitlines()
    listed = json.loads(run(capsys, "status", "-A", "-o", "json")[0])["items"]
    assert names == [f"gang.troupe.io/{i['metadata']['name']}" for i in listed]
    assert "gang.troupe.io/urgent" in names and not any(n.startswith("gang/") or ":" in n for n in names)
    assert run(capsys, "why", "ml/urgent-0", "-o", "name", code=1)[0] == ""  # no such pod: nothing on stdout


def test_jsonpath_prints_kubectls_templates(capsys):
    out = run(capsys, "status", "-A", "-o", "jsonpath={.items[*].spec.gangName}")[0]
    assert out.split(" ")[:2] == ["urgent", "pod:llm-big-0"] and not out.endswith("\n")  # as kubectl's: no newline
    rows = run(capsys, "status", "-A", "-o",
               'jsonpath={range .items[*]}{.metadata.namespace}/{.spec.gangName}{"\\t"}{.status.phase}{"\\n"}{end}')[0]
    assert rows.splitlines()[0] == "ml/urgent\tUnschedulable"
    held = run(capsys, "status", "-A", "-o", 'jsonpath={.items[?(@.status.phase=="Held")].spec.gangName}')[0]
    assert held == "misc"
    assert run(capsys, "status", "-A", "-o", "jsonpath={.items[0].status.nothing}|")[0] == "|"  # missing: nothing
    assert run(capsys, "topology", "-o", "jsonpath={.name}: {.free} of {.allocatable}")[0].startswith("cluster: ")


def test_custom_columns_print_a_row_per_gang_with_none_for_a_missing_field(capsys):
    out = run(capsys, "status", "-A", "-o", "custom-columns=GANG:.spec.gangName,QUEUE:.status.queuePosition,"
              "VICTIMS:{.status.victims}")[0].splitlines()
    assert out[0].split() == ["GANG", "QUEUE", "VICTIMS"]
    assert out[1].split() == ["urgent", "1", "<none>"]
    bare = run(capsys, "status", "-A", "-o", "custom-columns=GANG:.spec.gangName", "--no-headers")[0]
    assert bare.splitlines()[:2] == ["urgent", "pod:llm-big-0"]


def test_no_headers_drops_the_tables_header_line(capsys):
    table = run(capsys, "status", "-A")[0].splitlines()
    assert table[0].startswith("NAMESPACE") and run(capsys, "status", "-A", "--no-headers")[0].splitlines() == table[1:]


def test_no_gangs_is_a_message_on_stderr_and_nothing_on_stdout(capsys):
    out, err = run(capsys, "status", "-n", "nowhere")
    assert out == "" and err.splitlines()[-1] == "no gangs found in namespace nowhere"
    listed, err = run(capsys, "status", "-n", "nowhere", "-o", "json")
    assert json.loads(listed)["items"] == [] and "no gangs" not in err  # data formats print the empty List only


@pytest.mark.parametrize(("output", "says"), [
    ("jsonpath={.items[", "jsonpath '{.items[': unclosed '{' at character 1"),
    ("jsonpath={range .items[*]}{.x}", "{range .items[*]} without {end}"),
    ("jsonpath={.items[}", "jsonpath {.items[}: cannot parse"),
    ("custom-columns=GANG", "'GANG': expected HEADER:EXPRESSION"),
    ("go-template={{.}}", "--output 'go-template={{.}}': expected one of table, wide, json, yaml, name"),
])
def test_an_output_it_cannot_use_is_one_line_naming_it_and_exit_2(capsys, output, says):
    with pytest.raises(SystemExit) as done:
        plugin.main(["status", "-o", output, "--snapshot", EXAMPLE])
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.splitlines()) == 1 and says in err, err


def test_a_template_file_is_read_as_kubectl_reads_one(tmp_path):
    (tmp_path / "columns").write_text("GANG   PHASE\n.spec.gangName   .status.phase\n")
    parsed = printers.parse_output(f"custom-columns-file={tmp_path / 'columns'}")
    listed = {"kind": "List", "items": [{"spec": {"gangName": "a"}, "status": {"phase": "Held"}}]}
    assert printers.custom_columns(listed, parsed.columns).splitlines() == ["GANG  PHASE", "a     Held"]
    (tmp_path / "template").write_text("{.items[0].spec.gangName}")
    assert printers.parse_output(f"jsonpath-file={tmp_path / 'template'}").template.render(listed) == "a"
    with pytest.raises(printers.OutputError, match="jsonpath-file=/nonexistent: cannot read"):
        printers.parse_output("jsonpath-file=/nonexistent")


@pytest.mark.parametrize(("template", "want"), [
    ("{.a}", "1"), ("{.b}", '["x","y"]'), ("{.b[*]}", "x y"), ("{.c}", '{"d":true}'), ("{.e}", "true"), ("{.f}", "1.5"),
    ("{range .b}[{@}]{end}", "[x][y]"), ("{'a'}{\"\\n\"}", "a\n"), ("{.}", '{"a":1.0,"b":["x","y"],'
                                                                     '"c":{"d":true},"e":true,"f":1.5}'),
])
def test_values_are_printed_as_kubectl_prints_them(template, want):
    data = {"a": 1.0, "b": ["x", "y"], "c": {"d": True}, "e": True, "f": 1.5}
    assert printers.Template(template).render(data) == want
