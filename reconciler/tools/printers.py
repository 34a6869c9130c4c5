"""kubectl's printers for ``kubectl troupe``: gangs as a ``List`` of ``Gang`` objects, ``-o name``,
``-o jsonpath=`` and ``-o custom-columns=`` (docs/decisions/052-kubectl-conventions.md).

- :func:`gang_list`: what ``status -o json|yaml`` prints, kubectl's ``List`` (``apiVersion: v1``,
  ``kind: List``) of ``troupe.io/v1alpha1`` ``Gang`` objects, each named as the reconciler names
  the gang's object (:func:`reconciler.engine.decision.gangobject.object_name`) and carrying
  Troupe's decision in its ``status``, so that ``kubectl get gang.troupe.io/NAME`` and the
  plugin's ``-o name`` name the same object.
- :func:`parse_output`: ``-o`` as kubectl reads it: ``table``, ``wide``, ``json``, ``yaml``,
  ``name``, ``jsonpath=TEMPLATE``, ``jsonpath-file=FILE``, ``custom-columns=SPEC``,
  ``custom-columns-file=FILE``.
- :class:`Template`: kubectl's JSONPath template (k8s.io/client-go/util/jsonpath, documented in
  "JSONPath Support", kubernetes.io/docs/reference/kubectl/jsonpath/): text outside braces
  printed as it is, ``{EXPRESSION}`` replaced by what it selects (several values one space
  apart; strings bare, numbers and booleans as written, objects and lists as JSON, nothing
  for a missing field), ``{range EXPRESSION}...{end}`` repeating its body for each selected
  value, ``{"\\n"}`` a quoted literal. Expressions are evaluated by jsonpath-ng's extended
  parser: ``.a.b``, ``[*]``, ``[0]``, ``[1:3]``, ``..name``, ``[?(@.status.phase=="Waiting")]``.
  Not supported: kubectl's ``[,]`` unions of several expressions in one bracket and
  ``{else}``.
- :func:`custom_columns`: ``HEADER:EXPRESSION,...``, one row per item of a List (one for any
  other object), ``<none>`` for a missing field, several values joined by ``,``, as kubectl's
  custom-columns printer does.

No cluster, no engine decisions: JSON values in, text out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.ext.parser import parse as jsonpath_parse
from jsonpath_ng.jsonpath import Fields

from reconciler.engine.decision.gangobject import object_name
from reconciler.tools import views
from reconciler.tools.render import columns as table
from reconciler.tools.render import data

#: The Gang objects' API group/version and what ``-o name`` prints before the name
#: (charts/troupe/files/crds/gangs.yaml: ``gangs.troupe.io``, kind ``Gang``).
GANG_API_VERSION = "troupe.io/v1alpha1"
GANG_RESOURCE = "gang.troupe.io"
#: ``-o`` formats that take no argument.
PLAIN = ("table", "wide", "json", "yaml", "name")
#: ``-o`` formats that take one after ``=``.
TEMPLATED = ("jsonpath", "jsonpath-file", "custom-columns", "custom-columns-file")
#: What custom-columns prints for a field the object does not have (kubectl's).
NONE = "<none>"


class OutputError(ValueError):
    """An ``-o`` value that cannot be used; the message names it."""


@dataclass(frozen=True)
class Output:
    """A parsed ``-o``: ``kind`` is one of :data:`PLAIN` or ``jsonpath``/``custom-columns``
    (the ``-file`` forms read); ``template``/``columns`` are set for those two."""

    kind: str
    template: Template | None = None
    columns: tuple[tuple[str, Template], ...] = ()

    @property
    def data(self) -> bool:
        """Whether this output prints data only (json, yaml, jsonpath): no message stands in for no gangs."""
        return self.kind in ("json", "yaml", "jsonpath")


def parse_output(raw: str) -> Output:
    """``-o RAW`` as kubectl reads it. Raises :class:`OutputError` naming the value: an
    unknown format, a template that does not parse, a file that cannot be read."""
    if raw in PLAIN:
        return Output(raw)
    kind, sep, arg = raw.partition("=")
    if not sep or kind not in TEMPLATED:
        raise OutputError(f"--output {raw!r}: expected one of {', '.join(PLAIN)}, jsonpath=TEMPLATE, "
                          "jsonpath-file=FILE, custom-columns=SPEC, custom-columns-file=FILE")
    if kind.endswith("-file"):
        try:
            with open(arg, encoding="utf-8") as f:
                arg = f.read()
        except OSError as e:
            raise OutputError(f"--output {kind}={arg}: cannot read: {e.strerror}") from None
        kind = kind.removesuffix("-file")
        if kind == "custom-columns":  # kubectl's file: a line of headers, a line of expressions
            lines = [line.split() for line in arg.splitlines() if line.strip()]
            if len(lines) != 2 or len(lines[0]) != len(lines[1]):
                raise OutputError(f"--output custom-columns-file: expected a line of headers and a line of as "
                                  f"many expressions, got {len(lines)} line(s)")
            arg = ",".join(f"{h}:{e}" for h, e in zip(lines[0], lines[1], strict=True))
    if kind == "jsonpath":
        return Output("jsonpath", template=Template(arg))
    return Output("custom-columns", columns=_columns(arg))


def _columns(spec: str) -> tuple[tuple[str, Template], ...]:
    out = []
    for part in spec.split(","):
        header, sep, expr = part.partition(":")
        if not sep or not header or not expr:
            raise OutputError(f"--output custom-columns={spec}: {part!r}: expected HEADER:EXPRESSION "
                              "(e.g. NAME:.metadata.name)")
        text = expr if expr.startswith("{") else "{" + expr + "}"  # kubectl's relaxed expression
        out.append((header, Template(text)))
    return tuple(out)


# --- kubectl's JSONPath templates ----------------------------------------------------------
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'')
_MISSING = object()


def _compile(expr: str) -> Any:
    """jsonpath-ng's expression for kubectl's ``expr`` (``.a.b``, ``$.a``, ``@.a``, ``[0]``, ``.``)."""
    text = expr.strip()
    if text.startswith("@"):
        text = "$" + text[1:]
    elif not text.startswith("$"):
        text = "$" + (text if text.startswith(("[", "..")) else text if text.startswith(".") else "." + text)
    if text in ("$", "$."):
        return None  # the current value itself
    try:
        return jsonpath_parse(text)
    except (JsonPathLexerError, JsonPathParserError) as e:
        raise OutputError(f"jsonpath {{{expr}}}: cannot parse: {str(e).splitlines()[0]}") from None


def _text(value: Any) -> str:
    """One selected value as kubectl prints it: strings bare, objects and lists as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


class Template:
    """A kubectl JSONPath template, parsed once (see the module's docstring for the syntax).
    Raises :class:`OutputError` naming the template for unbalanced braces, a ``{range}``
    without ``{end}`` (or the reverse) and an expression jsonpath-ng cannot parse."""

    def __init__(self, text: str) -> None:
        self.text = text
        nodes, rest = self._parse(list(self._tokens(text)), 0, top=True)
        assert rest is None
        self._nodes = nodes

    def _tokens(self, text: str) -> list[tuple[str, str]]:
        out, at = [], 0
        while at < len(text):
            start = text.find("{", at)
            if start < 0:
                out.append(("text", text[at:]))
                break
            if start > at:
                out.append(("text", text[at:start]))
            end = self._close(text, start)
            body = text[start + 1:end].strip()
            quoted = _QUOTED.fullmatch(body)
            if quoted is not None:
                out.append(("text", self._literal(quoted)))
            elif body == "end":
                out.append(("end", ""))
            elif body.startswith("range ") or body == "range":
                out.append(("range", body[len("range"):].strip()))
            else:
                out.append(("expr", body))
            at = end + 1
        return out

    def _literal(self, quoted: re.Match[str]) -> str:
        raw = quoted.group(1)
        if raw is None:  # single quotes: no escapes
            return quoted.group(2)
        try:  # double quotes: Go's escapes, \n, \t, \", \\ (JSON's are the same)
            return str(json.loads(f'"{raw}"', strict=False))
        except json.JSONDecodeError:
            raise OutputError(f"jsonpath {self.text!r}: cannot read the literal {quoted.group(0)}") from None

    def _close(self, text: str, start: int) -> int:
        depth, quote = 0, ""
        for i in range(start, len(text)):
            char = text[i]
            if quote:
                quote = "" if char == quote and text[i - 1] != "\\" else quote
            elif char in "\"'":
                quote = char
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return i
        raise OutputError(f"jsonpath {self.text!r}: unclosed '{{' at character {start + 1}")

    def _parse(self, tokens: list[tuple[str, str]], at: int, top: bool) -> tuple[list[Any], int | None]:
        nodes: list[Any] = []
        while at < len(tokens):
            kind, value = tokens[at]
            if kind == "end":
                if top:
                    raise OutputError(f"jsonpath {self.text!r}: {{end}} without {{range}}")
                return nodes, at + 1
            if kind == "range":
                body, after = self._parse(tokens, at + 1, top=False)
                if after is None:
                    raise OutputError(f"jsonpath {self.text!r}: {{range {value}}} without {{end}}")
                nodes.append(("range", _compile(value), body))
                at = after
                continue
            nodes.append(("text", value) if kind == "text" else ("expr", _compile(value)))
            at += 1
        return nodes, None

    @staticmethod
    def _select(path: Any, data: Any) -> list[Any]:
        return [data] if path is None else [m.value for m in path.find(data)]

    def _run(self, nodes: Sequence[Any], data: Any, out: list[str]) -> None:
        for node in nodes:
            if node[0] == "text":
                out.append(node[1])
            elif node[0] == "expr":
                out.append(" ".join(_text(v) for v in self._select(node[1], data)))
            else:
                for value in self._select(node[1], data):
                    items = value if isinstance(value, list) and node[1] is not None and _is_whole(node[1]) else [value]
                    for item in items:
                        self._run(node[2], item, out)

    def values(self, data: Any) -> list[Any]:
        """The values a template of one expression selects (custom-columns' cells)."""
        exprs = [n for n in self._nodes if n[0] == "expr"]
        return [v for n in exprs for v in self._select(n[1], data)]

    def render(self, data: Any) -> str:
        """The template applied to ``data`` (plain JSON values)."""
        out: list[str] = []
        self._run(self._nodes, data, out)
        return "".join(out)


def _is_whole(path: Any) -> bool:
    """Whether ``path`` ends on a field (``.items``) rather than on selected elements
    (``.items[*]``): ``{range .items}`` repeats for each element of the list, as
    ``{range .items[*]}`` does."""
    right = getattr(path, "right", path)
    return isinstance(right, Fields)


# --- the printers ---------------------------------------------------------------------------
def gang_item(s: views.GangStatus) -> dict[str, Any]:
    """One gang as a ``Gang`` object: ``metadata.name`` the object's name (the recorded
    object's when one was read, else :func:`~reconciler.engine.decision.gangobject.object_name`),
    ``spec.gangName`` the gang's name, ``status`` Troupe's decision
    (:meth:`reconciler.tools.views.GangStatus.to_json` without the namespace and name, with
    ``object``: the Gang object's recorded status when one was read)."""
    recorded = s.recorded.get("name") if s.recorded is not None else None
    name = recorded if isinstance(recorded, str) and recorded else object_name(s.gang)
    status = {k: v for k, v in s.to_json().items() if k not in ("namespace", "name")}
    return {"apiVersion": GANG_API_VERSION, "kind": "Gang", "metadata": {"name": name, "namespace": s.namespace},
            "spec": {"gangName": s.name}, "status": status}


def gang_list(gangs: Sequence[views.GangStatus]) -> dict[str, Any]:
    """kubectl's ``List`` of :func:`gang_item` objects, as ``kubectl get -o json`` prints one."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": [gang_item(s) for s in gangs]}


def gang_names(gangs: Sequence[views.GangStatus]) -> str:
    """``-o name``: ``gang.troupe.io/NAME`` per gang, the name ``kubectl get`` takes."""
    return "".join(f"{GANG_RESOURCE}/{gang_item(s)['metadata']['name']}\n" for s in gangs)


def custom_columns(obj: Any, columns: Sequence[tuple[str, Template]], headers: bool = True) -> str:
    """``-o custom-columns``: a row per item of a List (one for any other object), the
    header line first unless ``headers`` is false; a missing field is ``<none>``."""
    items = obj["items"] if isinstance(obj, Mapping) and obj.get("kind") == "List" else [obj]
    rows: list[tuple[str, ...]] = [tuple(h for h, _ in columns)] if headers else []
    for item in items:
        cells = []
        for _, template in columns:
            found = template.values(item)
            cells.append(",".join(_text(v) for v in found) if found else NONE)
        rows.append(tuple(cells))
    if len(columns) == 1:  # render.columns pads every column but the last: one column is only a last
        return "".join(r[0] + "\n" for r in rows)
    return "".join(line.rstrip() + "\n" for line in table(rows))


def printed(obj: Any, output: Output, headers: bool = True) -> str:
    """``obj`` (plain JSON values) in a data ``output``: json, yaml, jsonpath or custom-columns."""
    if output.kind == "jsonpath":
        assert output.template is not None
        return output.template.render(obj)
    if output.kind == "custom-columns":
        return custom_columns(obj, output.columns, headers)
    return data(obj, output.kind)
