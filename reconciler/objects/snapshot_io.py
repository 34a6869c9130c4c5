"""Reading a cluster snapshot: JSON or YAML bytes to Kubernetes objects.

A snapshot is what ``kubectl get nodes,pods -A -o json`` or ``-o yaml`` prints (one
``v1 List``), or a multi-document YAML of objects, or a stream of concatenated JSON
values. It is read as JSON when the source is named ``*.json`` or its first
non-whitespace character is ``{`` or ``[``; as YAML otherwise. JSON is read by orjson;
YAML by libyaml's ``yaml.CSafeLoader`` when PyYAML was built with it, else by the pure
Python ``yaml.SafeLoader`` (:func:`yaml_loader`). Content that looks like JSON but is not
(YAML in flow style, ``{kind: Node, ...}``) is read as YAML, unless the source is named
``*.json``.

Errors are :class:`InputError` with one line naming the source, the format and the place
(``snapshot.json: not valid JSON at line 3, column 7: ...``). No Kubernetes client, no
engine: bytes in, plain dicts and lists out.
"""

from __future__ import annotations

import gc
import json
import mmap
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Literal

import msgspec
import orjson
import yaml

#: The two formats a snapshot is read in.
Format = Literal["json", "yaml"]
#: A snapshot's bytes: read, or a view of a file mapped into memory (:func:`read_file`).
Data = bytes | memoryview

_BOM = b"\xef\xbb\xbf"
_FIRST_CONTENT = re.compile(rb"[^ \t\r\n]")


class InputError(Exception):
    """Bad input; the message is the one line printed."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block, as it was after. Reading a
    snapshot allocates millions of objects and frees none; each automatic collection
    would walk all of them again (half the time orjson takes on a large snapshot)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_file(path: str) -> Data:
    """The bytes of the file at ``path``, mapped into memory rather than copied when the
    file can be mapped (a large snapshot is parsed in place), else read (an empty file,
    a pipe such as ``<(kubectl get ...)``). Raises :class:`OSError`."""
    with open(path, "rb") as f:
        try:
            return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        except (ValueError, OSError):
            return f.read()


def yaml_loader() -> type[Any]:
    """The YAML loader snapshots are read with: ``yaml.CSafeLoader`` (libyaml, C) when
    ``yaml.__with_libyaml__`` is true, else ``yaml.SafeLoader`` (pure Python). Both build
    the same plain objects; the C loader is about ten times faster."""
    if getattr(yaml, "__with_libyaml__", False):
        loader: type[Any] = yaml.CSafeLoader
        return loader
    return yaml.SafeLoader


def snapshot_format(data: Data, source: str) -> Format:
    """``"json"`` when ``source`` ends in ``.json`` (any case) or the first character of
    ``data`` after whitespace (and a UTF-8 byte order mark) is ``{`` or ``[``; else
    ``"yaml"``. Empty data is YAML (no documents)."""
    if source.lower().endswith(".json"):
        return "json"
    first = _FIRST_CONTENT.search(data, len(_BOM) if data[: len(_BOM)] == _BOM else 0)
    return "json" if first is not None and first.group() in (b"{", b"[") else "yaml"


def _utf8_problem(data: bytes) -> str | None:
    """Where ``data`` stops being UTF-8 (``"not UTF-8 text at line 2, column 5"``, the
    column in bytes), or None when it is UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        return f"not UTF-8 text at line {line}, column {column}"
    return None


def _json_error(source: str, e: json.JSONDecodeError) -> InputError:
    return InputError(f"{source}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}")


def _skip_space(text: str, at: int) -> int:
    """The index of the first non-whitespace character of ``text`` from ``at``."""
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def load_json(data: Data, source: str) -> list[Any]:
    """The documents of a JSON snapshot: ``[value]`` for one value (an object, a List),
    every value, in order, for concatenated values; ``[]`` for empty data.

    Raises :class:`InputError` naming ``source``, ``JSON``, the line and column (1-based)
    and what is wrong, or where the data is not UTF-8.
    """
    view = memoryview(data)
    body = view[len(_BOM):] if view[: len(_BOM)] == _BOM else view
    try:
        return [orjson.loads(body)]
    except orjson.JSONDecodeError as e:
        first_error: json.JSONDecodeError = e
    if _FIRST_CONTENT.search(body) is None:
        return []
    raw = body.tobytes()
    problem = _utf8_problem(raw)
    if problem is not None:
        raise InputError(f"{source}: not valid JSON: {problem}")
    text = raw.decode("utf-8")
    decoder = json.JSONDecoder()
    values: list[Any] = []
    at = _skip_space(text, 0)
    while at < len(text):
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as e:
            # Past the first value, the stream's own error is the one that says where.
            raise _json_error(source, e if values else first_error) from None
        values.append(value)
        at = _skip_space(text, at)
    return values


def load_yaml(data: Data, source: str) -> list[Any]:
    """The documents of a YAML snapshot, in order (``None`` for an empty document), read
    with :func:`yaml_loader`.

    Raises :class:`InputError` naming ``source``, ``YAML``, the line and column (1-based)
    when the parser gives them, and the problem, or where the data is not UTF-8.
    """
    raw = data.tobytes() if isinstance(data, memoryview) else data
    try:
        return list(yaml.load_all(raw, Loader=yaml_loader()))
    except yaml.reader.ReaderError as e:
        problem = _utf8_problem(raw) or f"{e.reason} at position {e.position}"
        raise InputError(f"{source}: not valid YAML: {problem}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{source}: not valid YAML{at}: {problem}") from None


def load_documents(data: Data, source: str) -> list[Any]:
    """The documents of a snapshot, read as :func:`snapshot_format` says: JSON with
    :func:`load_json`, YAML with :func:`load_yaml`. Content taken for JSON only by its
    first character that JSON refuses but YAML reads is YAML. Raises :class:`InputError`
    (for content that is neither, the JSON error)."""
    with collector_paused():
        if snapshot_format(data, source) == "yaml":
            return load_yaml(data, source)
        if source.lower().endswith(".json"):
            return load_json(data, source)
        try:
            return load_json(data, source)
        except InputError as json_error:
            try:
                return load_yaml(data, source)
            except InputError:
                raise json_error from None


def read_objects(data: Data | str, source: str) -> list[tuple[str, str, Mapping[str, Any]]]:
    """``(where, kind, object)`` for every object of a snapshot (``source`` names it:
    a path or ``<stdin>``), in order, ``*List`` documents unpacked into their items.

    ``where`` names the document (1-based) and the item (0-based): ``snapshot.json:
    document 1 item 7``. An item without a kind takes its List's (``NodeList`` items are
    Nodes). Empty documents are skipped.

    Raises :class:`InputError` when the data is neither JSON nor YAML, a document or an
    item is not an object, a kind is missing, or a List's ``items`` is not a list.
    """
    with collector_paused():
        return _unpacked(load_documents(data.encode("utf-8") if isinstance(data, str) else data, source), source)


def _unpacked(docs: list[Any], source: str, first: int = 1) -> list[tuple[str, str, Mapping[str, Any]]]:
    """:func:`read_objects` on the documents ``docs`` read from ``source``, numbered from ``first``."""
    out: list[tuple[str, str, Mapping[str, Any]]] = []
    for n, doc in enumerate(docs, start=first):
        where = f"{source}: document {n}"
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise InputError(f"{where}: expected a Kubernetes object, got a {type(doc).__name__}")
        kind = doc.get("kind")
        if not isinstance(kind, str) or not kind:
            raise InputError(f"{where}: kind: missing field")
        if kind.endswith("List"):
            items = doc.get("items")
            if items is None:
                items = []
            if not isinstance(items, list):
                raise InputError(f"{where} ({kind}): items: expected a list")
            for k, obj in enumerate(items):
                at = f"{where} item {k}"
                if not isinstance(obj, Mapping):
                    raise InputError(f"{at}: expected a Kubernetes object, got a {type(obj).__name__}")
                item_kind = obj.get("kind") or (kind[: -len("List")] if kind != "List" else None)
                if not isinstance(item_kind, str) or not item_kind:
                    raise InputError(f"{at}: kind: missing field")
                out.append((at, item_kind, obj))
        else:
            out.append((where, kind, doc))
    return out


# --- the retained fast path: only what Troupe reads -----------------------------------------
#: Kinds whose objects :func:`read_retained` decodes cut down to the fields the reconciler's
#: cache keeps of them (:mod:`reconciler.objects.retain`): the bulk of any snapshot. Other kinds
#: (workload custom resources, SharedDeviceGroups...) are decoded whole.
RETAINED_KINDS = ("Pod", "Node", "Job")


def _merged(a: Any, b: Any) -> Any:
    """Two retain policies as one that keeps what either keeps."""
    if a is True or b is True or not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return True
    out = dict(a)
    for key, sub in b.items():
        out[key] = _merged(out[key], sub) if key in out else sub
    return out


def _typed(policy: Mapping[str, Any], name: str) -> Any:
    """A ``TypedDict`` (every key optional) holding what ``policy`` keeps: a kept subtree
    is any JSON value; a policy below a key is a mapping, or a list of mappings, of it."""
    from typing import TypedDict

    fields: dict[str, Any] = {}
    for key, sub in policy.items():
        if isinstance(sub, Mapping) and not isinstance(sub, frozenset):
            inner = _typed(sub, f"{name}_{key}")
            fields[key] = inner | list[inner] | None  # type: ignore[valid-type]
        else:
            fields[key] = Any
    return TypedDict(name, fields, total=False)  # type: ignore[operator]


@lru_cache(maxsize=1)
def _decoders() -> tuple[Any, Any]:
    """The decoder of a List whose items keep the union of :data:`RETAINED_KINDS`' fields,
    and the one that gives each item's raw bytes."""
    from reconciler.objects import retain

    policy = {"kind": True, "apiVersion": True, **_merged(_merged(retain.POD, retain.NODE), retain.JOB)}
    item = _typed(policy, "Item")
    from typing import TypedDict

    # The functional form: the items' type is made above, at run time.
    Listed = TypedDict("Listed", {"kind": str, "apiVersion": str, "metadata": dict[str, Any],  # noqa: UP013
                                  "items": list[item]}, total=False)  # type: ignore[valid-type]

    class Raw(TypedDict, total=False):
        items: list[msgspec.Raw]

    return msgspec.json.Decoder(Listed), msgspec.json.Decoder(Raw)


def decode_retained(data: Data) -> tuple[list[Mapping[str, Any]], Mapping[str, Any]] | None:
    """The items and the ``metadata`` (``continue``, ``resourceVersion``) of one JSON List
    (a snapshot, or a page of an API list), each item cut to what
    Troupe reads when it is one of :data:`RETAINED_KINDS` and whole otherwise; an item
    without a kind takes its List's (``PodList`` items are Pods, with ``kind`` set). None
    when ``data`` is not one JSON List of objects in the shapes Troupe reads (the caller
    then reads it whole, and its parser names what is wrong). Decoded by msgspec, which
    skips the fields it is not asked for without building them: about twice as fast as
    reading every field (``benchmarks/kubectl_troupe.py``)."""
    listed, raw = _decoders()
    view = memoryview(data)
    body = view[len(_BOM):] if view[: len(_BOM)] == _BOM else view
    try:
        doc = listed.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    kind = doc.get("kind")
    items = doc.get("items")
    if not isinstance(kind, str) or not kind.endswith("List") or not isinstance(items, list):
        return None
    default = kind[: -len("List")] or None
    whole: list[int] = []
    for k, item in enumerate(items):
        item_kind = item.get("kind") or default
        if not item_kind:
            return None
        item["kind"] = item_kind
        if item_kind not in RETAINED_KINDS:
            whole.append(k)
    if whole:
        pieces = raw.decode(body)["items"]
        for k in whole:
            obj = orjson.loads(bytes(pieces[k]))
            obj.setdefault("kind", items[k]["kind"])
            items[k] = obj
    meta = doc.get("metadata")
    return items, meta if isinstance(meta, Mapping) else {}


#: How far from its end a JSON snapshot is searched for values appended after its List.
APPENDED_BYTES = 1 << 20


def _appended(data: Data) -> int | None:
    """Where the values appended after a JSON snapshot's List begin (Troupe's ConfigMap,
    ``kubectl get configmap ... -o json >> snapshot.json``): the first line of its last
    :data:`APPENDED_BYTES` that starts with ``{``, as a value kubectl prints at the top level
    does (its nested objects are indented); None when there is none."""
    view = memoryview(data)
    start = max(0, len(view) - APPENDED_BYTES)
    at = bytes(view[start:]).find(b"\n{")
    return None if at < 0 else start + at + 1


def read_retained(data: Data, source: str) -> list[tuple[str, str, Mapping[str, Any]]]:
    """:func:`read_objects`, faster on what ``kubectl get ... -o json`` prints (one List,
    possibly followed by a few appended values, :func:`_appended`): the List's Pods, Nodes
    and Jobs come cut down to what Troupe reads (:func:`decode_retained`), what the
    reconciler's cache holds of them, so a decision on them is the reconciler's; appended
    values are read whole, as documents 2, 3... Anything else (YAML, a field of an unexpected
    type) is read by :func:`read_objects`. Raises :class:`InputError` as it does."""
    with collector_paused():
        if snapshot_format(data, source) == "json":
            found, rest = decode_retained(data), []
            if found is None and (cut := _appended(data)) is not None:
                found = decode_retained(memoryview(data)[:cut])
                try:
                    rest = _unpacked(load_json(memoryview(data)[cut:], source), source, first=2) if found else []
                except InputError:
                    found = None  # read whole below: its parser says where the error is
            if found is not None:
                listed = [(f"{source}: document 1 item {k}", str(obj["kind"]), obj) for k, obj in enumerate(found[0])]
                return listed + rest
        return read_objects(data, source)
