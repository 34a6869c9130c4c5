"""DRA device selectors: CEL expressions evaluated against one device, with cel-python.

A DeviceClass's and a device request's selectors are CEL expressions over ``device``
(Kubernetes API reference, ``resource.k8s.io/v1`` ``CELDeviceSelector``): ``device.driver``
(string), ``device.attributes[domain][id]`` (int, bool, string or version, grouped by the
qualified name's domain; an unqualified name belongs to the driver's domain) and
``device.capacity[domain][id]`` (a ``Quantity``). Kubernetes adds its own CEL libraries; of
the Quantity library this supports ``quantity("80Gi")`` and the methods ``compareTo``,
``isGreaterThan``, ``isLessThan``, ``asInteger`` and ``asApproximateFloat``, and version
attributes read as their strings. An expression that does not compile, uses something else,
or yields anything but a boolean raises :class:`SelectorError` quoting it: the caller holds
the gang with that reason rather than guessing (docs/decisions/044-dra.md).

Evaluation is pure (no clock, no I/O) and memoized per (expression, device): cel-python
takes about half a millisecond per evaluation, and devices change rarely. A selector is
compiled once while it stays in a memo bounded by the bytes its parse holds
(:data:`COMPILED_MEMO_BYTES`; a compiled selector takes about 700 bytes per node of its
parse tree, so one of more than :data:`MAX_PARSE_NODES` is refused), and an answer is kept by the compiled
selector's ident, never by a copy of its text (docs/decisions/063-memos-held-by-their-users.md).

A selector is a tenant's program run by the reconciler, so its work is bounded before it
runs (docs/decisions/049-hostile-tenants-third-round.md):

- :func:`cost` estimates one evaluation's work from the expression alone, as Kubernetes'
  cost estimator does: every node of the parse tree a unit, a comprehension (``all``,
  ``exists``, ``exists_one``, ``map``, ``filter``) its body times the size of what it walks
  (a list literal's length; a device's attributes or capacity map, at most
  :data:`DEVICE_MAP_SIZE` entries by the API's rules; anything else
  :data:`UNKNOWN_SIZE`). :func:`check` refuses one over :data:`MAX_COST`: the gang that asks
  for it is held, with the reason.
- The memo is keyed by the part of the device the expression reads (:func:`reads`): a
  selector on ``model`` is evaluated once per model, not once per device (every device
  carries its own ``uuid``), so the memo holds what the cluster's selectors need.
- :func:`evaluate` says whether it evaluated or found the answer, so a caller can charge
  each evaluation's cost to a budget (:func:`reconciler.engine.ledger.draunits.node_units`).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import celpy
import lark
from celpy import celtypes

from reconciler.engine.model.memo import ChargedMemo
from reconciler.engine.model.quantity import QuantityError, parse_quantity
from troupe.errors import quoted

#: One device as a selector sees it: ``(driver, attributes, capacity)`` with attributes
#: ``((qualified name, value), ...)`` (value: int, bool or str) and capacity ``((qualified
#: name, Fraction), ...)``, both sorted: hashable, so evaluations are memoized.
DeviceView = tuple[str, tuple[tuple[str, Any], ...], tuple[tuple[str, Fraction], ...]]


#: Estimated units (:func:`cost`) one evaluation of a selector may take: about 30 ms of
#: cel-python; Kubernetes' own bound (1,000,000 units of cel-go, 100 to 1,000 times faster)
#: lets through selectors that take seconds here.
MAX_COST = 100_000
#: Entries of a device's ``attributes`` or ``capacity`` map a comprehension may walk at most:
#: a device carries at most 32 attributes and capacities together (``resource.k8s.io/v1``).
DEVICE_MAP_SIZE = 32
#: What a comprehension over anything else (a function's list, say) is taken to walk.
UNKNOWN_SIZE = 1_000
#: Comprehension macros: their body runs once per element of what they walk.
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


class SelectorError(ValueError):
    """A selector that cannot be evaluated; the message quotes it and says why."""


class Quantity(celtypes.StringType):
    """A Kubernetes ``Quantity`` in CEL: exact (a Fraction of base units), shown as given."""

    exact: Fraction

    def __new__(cls, text: str, exact: Fraction) -> Quantity:
        obj = super().__new__(cls, text)
        assert isinstance(obj, Quantity)
        obj.exact = exact
        return obj


def _quantity(text: Any) -> Quantity:
    try:
        return Quantity(str(text), parse_quantity(str(text)))
    except QuantityError as e:
        raise ValueError(f"quantity({str(text)!r}): {e}") from None


def _q(value: Any) -> Fraction:
    if isinstance(value, Quantity):
        return value.exact
    raise TypeError(f"expected a quantity, got {type(value).__name__}")


_FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "compareTo": lambda a, b: celtypes.IntType((_q(a) > _q(b)) - (_q(a) < _q(b))),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_q(a) > _q(b)),
    "isLessThan": lambda a, b: celtypes.BoolType(_q(a) < _q(b)),
    "asInteger": lambda a: celtypes.IntType(int(_q(a))),
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(_q(a))),
}


def _program(expression: str) -> Any:
    return _compiled(expression).program


def _short(e: BaseException) -> str:
    text = str(e.args[0]) if e.args else type(e).__name__
    text = text.split(" (in activation", 1)[0]
    return text.splitlines()[0][:200] if text else type(e).__name__


def _cel(value: Any) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    return celtypes.StringType(str(value))


class _Domains(celtypes.MapType):
    """Attributes or capacity by domain: a domain the device has nothing of reads as an
    empty map, as in Kubernetes (so ``"x" in device.attributes["other.io"]`` is false)."""

    def __getitem__(self, key: Any) -> Any:
        if key in self:
            return super().__getitem__(key)
        return celtypes.MapType({})


def _grouped(driver: str, pairs: tuple[tuple[str, Any], ...], convert: Any) -> Any:
    groups: dict[str, dict[Any, Any]] = {}
    for name, value in pairs:
        domain, _, ident = name.rpartition("/")
        groups.setdefault(domain or driver, {})[celtypes.StringType(ident)] = convert(value)
    return _Domains({celtypes.StringType(d): celtypes.MapType(v) for d, v in groups.items()})


def _unwrap(tree: Any) -> Any:
    """The first node below ``tree`` that is not a chain of single children (``expr`` ->
    ``conditionalor`` -> ... -> ``primary``), stopping at a list literal."""
    while (isinstance(tree, lark.Tree) and tree.data != "list_lit" and len(tree.children) == 1
           and isinstance(tree.children[0], lark.Tree)):
        tree = tree.children[0]
    return tree


def _walked(tree: Any) -> int:
    """How many elements a comprehension over ``tree`` walks at most (module docstring)."""
    tree = _unwrap(tree)
    if isinstance(tree, lark.Tree):
        if tree.data == "list_lit":
            return len(tree.children[0].children) if tree.children else 0
        if tree.data == "member_dot_arg" and str(tree.children[1]) in ("map", "filter"):
            return _walked(tree.children[0])
        if tree.data == "member_index" and _device_map(tree.children[0]):
            return DEVICE_MAP_SIZE
    return UNKNOWN_SIZE


def _device_map(tree: Any) -> bool:
    """Whether ``tree`` is ``device.attributes`` or ``device.capacity``."""
    tree = _unwrap(tree)
    return (isinstance(tree, lark.Tree) and tree.data == "member_dot" and str(tree.children[1]) in
            ("attributes", "capacity") and _is_device(tree.children[0]))


def _is_device(tree: Any) -> bool:
    tree = _unwrap(tree)
    return isinstance(tree, lark.Tree) and tree.data == "ident" and str(tree.children[0]) == "device"


def _units(tree: Any) -> int:
    if not isinstance(tree, lark.Tree):
        return 0
    if tree.data == "member_dot_arg" and len(tree.children) == 3 and str(tree.children[1]) in _MACROS:
        target, _, arguments = tree.children
        body = sum(_units(a) for a in arguments.children[1:]) if isinstance(arguments, lark.Tree) else 0
        return 1 + _units(target) + _walked(target) * (1 + body)
    return 1 + sum(_units(child) for child in tree.children)


@dataclass(frozen=True, eq=False, slots=True)
class _Compiled:
    """One selector compiled, with what is read from its parse once: ``program``
    (cel-python's), ``units`` (:func:`cost`), ``reads`` (:func:`reads`), ``nodes`` (the
    parse tree's nodes and tokens: what it takes in memory), ``ident`` (what the memo of
    answers knows it by, so an answer holds no copy of the expression), or ``error``, why
    it cannot be compiled (then nothing else)."""

    ident: int
    program: Any = None
    units: int = 0
    reads: frozenset[tuple[str, str, str]] | None = None
    nodes: int = 0
    error: str = ""


#: Bytes a compiled selector holds per node of its parse tree (lark's trees and tokens with
#: their positions: measured 626 to 645 on selectors from 88 characters to 10 KiB).
NODE_BYTES = 700
#: What the memo of compiled selectors holds at most, in bytes: about 1,600 selectors of 100
#: characters (40 KiB each), or 11 of the largest kept (:data:`MAX_PARSE_NODES`)
#: (docs/decisions/063-memos-held-by-their-users.md). Bounded by count (1,024), it held 1,024
#: times the largest a tenant wrote: a selector of 10 KiB (the API's limit) takes up to
#: 36 MiB compiled (a list literal of 5,000 items, 56,000 nodes).
COMPILED_MEMO_BYTES = 64 * 2**20
#: Nodes and tokens the parse of one selector may have (about 5.6 MiB compiled, an eleventh
#: of :data:`COMPILED_MEMO_BYTES`): a selector of 100 characters has about 60, a chain of
#: 20 attribute comparisons about 1,300. A larger one is refused, and the refusal kept.
MAX_PARSE_NODES = 8192
_idents = itertools.count()


def _charge(expression: str, compiled: _Compiled) -> int:
    """What ``compiled`` holds, in bytes: its tree's nodes, the expression (the key, the
    source the program keeps), the error message."""
    return NODE_BYTES * compiled.nodes + 4 * sys.getsizeof(expression) + sys.getsizeof(compiled.error)


_compiled_memo: ChargedMemo[str, _Compiled] = ChargedMemo(COMPILED_MEMO_BYTES, _charge)


def _compiled(expression: str) -> _Compiled:
    """``expression`` compiled (kept in a memo of :data:`COMPILED_MEMO_BYTES`, an error as
    well as a program); raises :class:`SelectorError` when it does not compile."""
    found = _compiled_memo.get(expression)
    if found is None:
        found = _compiled_memo.put(expression, _compile(expression))
    if found.error:
        raise SelectorError(found.error)
    return found


def _compile(expression: str) -> _Compiled:
    ident = next(_idents)
    try:
        tree = celpy.Environment().compile(expression)
        program = celpy.Environment().program(tree, functions=_FUNCTIONS)
    except Exception as e:  # noqa: BLE001  cel-python raises its own and parser errors alike
        return _Compiled(ident, error=f"CEL selector {expression!r} does not compile: {_short(e)}")
    nodes = _nodes(tree)
    if nodes > MAX_PARSE_NODES:
        return _Compiled(ident, error=f"CEL selector {quoted(expression)} is larger than Troupe keeps compiled "
                                      f"({nodes} parse nodes, at most {MAX_PARSE_NODES})")
    try:
        return _Compiled(ident, program, _units(tree), _reads(tree), nodes)
    except RecursionError:  # a tree deeper than the interpreter's stack: read as one that cannot be
        return _Compiled(ident, error=f"CEL selector {quoted(expression)} nests too deeply to be read")


def _nodes(tree: Any) -> int:
    """How many nodes and tokens ``tree`` has (counted without recursion)."""
    count, stack = 0, [tree]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, lark.Tree):
            stack.extend(node.children)
    return count


def cost(expression: str) -> int:
    """The estimated units of one evaluation of ``expression`` (module docstring): about
    0.3 microseconds of cel-python each beyond a fixed quarter of a millisecond. Raises
    :class:`SelectorError` when it does not compile."""
    return _compiled(expression).units


def check(expression: str) -> None:
    """Raise :class:`SelectorError` if ``expression`` does not compile, or costs more than
    :data:`MAX_COST` (:func:`cost`)."""
    _program(expression)
    estimated = cost(expression)
    if estimated > MAX_COST:
        raise SelectorError(f"CEL selector {expression!r} costs more than Troupe evaluates per device "
                            f"(estimated {estimated} units, at most {MAX_COST})")


def reads(expression: str) -> frozenset[tuple[str, str, str]] | None:
    """What of a device ``expression`` reads: ``(map, domain, name)`` for each
    ``device.attributes["<domain>"].<name>`` (or ``["<name>"]``), ``(map, domain, "*")``
    for a whole domain's map, ``("driver", "", "")``; None when it reads the device any
    other way (a computed key, ``device`` bound by a comprehension, another field), so
    the whole device matters. Raises :class:`SelectorError` when it does not compile."""
    return _compiled(expression).reads


def _reads(tree: Any) -> frozenset[tuple[str, str, str]] | None:
    """:func:`reads` of a parse tree."""
    found: set[tuple[str, str, str]] = set()

    def literal(tree: Any) -> str | None:
        tree = _unwrap(tree)
        if isinstance(tree, lark.Tree) and tree.data == "literal":
            token = str(tree.children[0])
            if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'" and "\\" not in token:
                return token[1:-1]
        return None

    def domain(tree: Any) -> tuple[str, str] | None:  # device.<map>["<domain>"]
        tree = _unwrap(tree)
        if isinstance(tree, lark.Tree) and tree.data == "member_index" and _device_map(tree.children[0]):
            name = literal(tree.children[1])
            if name is not None:
                return str(_unwrap(tree.children[0]).children[1]), name
        return None

    def visit(tree: Any) -> bool:
        if not isinstance(tree, lark.Tree):
            return True
        if tree.data in ("member_dot", "member_index"):
            held = domain(tree.children[0])
            name = str(tree.children[1]) if tree.data == "member_dot" else literal(tree.children[1])
            if held is not None and name is not None:
                found.add((held[0], held[1], name))
                return True
            if tree.data == "member_dot" and _is_device(tree.children[0]) and str(tree.children[1]) == "driver":
                found.add(("driver", "", ""))
                return True
        held = domain(tree)
        if held is not None:
            found.add((held[0], held[1], "*"))
            return True
        if tree.data == "ident" and str(tree.children[0]) == "device":
            return False
        return all(visit(child) for child in tree.children)

    return frozenset(found) if visit(tree) else None


def project(expression: str, device: DeviceView) -> DeviceView:
    """``device`` cut to what ``expression`` reads (:func:`reads`; the driver stays, as an
    unqualified name's domain): two devices that agree there are one evaluation. A
    projection is a projection of itself."""
    wanted = reads(expression)
    if wanted is None:
        return device
    driver, attributes, capacity = device
    if not attributes and not capacity:
        return device

    def kept(kind: str, pairs: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
        out = []
        for name, value in pairs:
            dom, _, ident = name.rpartition("/")
            dom = dom or driver
            if (kind, dom, ident) in wanted or (kind, dom, "*") in wanted:
                out.append((name, value))
        return tuple(out)

    return (driver, kept("attributes", attributes), kept("capacity", capacity))


#: Bytes one kept answer holds beside the pairs of its device's projection (its key, the
#: projection's tuples, the memo's entry), and per pair: measured 240 bytes for a device
#: read whole (its own tuples), 340 for one attribute read, 1,290 for 17.
ANSWER_BYTES, PAIR_BYTES = 256, 64
#: What the memo of answers holds at most, in bytes: about 100,000 answers on one attribute
#: each (docs/decisions/063-memos-held-by-their-users.md). Bounded by count (262,144), it held
#: that many times the largest answer, an error message quoting its selector whole.
ANSWERS_MEMO_BYTES = 32 * 2**20


def _answer_charge(key: tuple[int, DeviceView], answer: bool | str) -> int:
    _, (_, attributes, capacity) = key
    return ANSWER_BYTES + PAIR_BYTES * (len(attributes) + len(capacity)) + (
        sys.getsizeof(answer) if isinstance(answer, str) else 0)


#: Answers by the compiled selector's ident (:class:`_Compiled`) and the device as it reads
#: it, or the error's message; shared by the threads that decide (the worker, a page's data).
_memo: ChargedMemo[tuple[int, DeviceView], bool | str] = ChargedMemo(ANSWERS_MEMO_BYTES, _answer_charge)


def evaluate(expression: str, device: DeviceView) -> tuple[bool, bool]:
    """``(matches, evaluated)``: whether the selector ``expression`` accepts ``device``
    (:func:`matches`), and whether that took an evaluation (False: the memo of answers,
    :data:`ANSWERS_MEMO_BYTES`, keyed by :func:`project`, had it). Raises
    :class:`SelectorError` as :func:`matches` does, also when the memo holds the error."""
    check(expression)
    key = (_compiled(expression).ident, project(expression, device))
    found = _memo.get(key)
    if found is not None:
        if isinstance(found, str):
            raise SelectorError(found)
        return found, False
    try:
        answer: bool | str = _evaluated(expression, key[1])
    except SelectorError as e:
        answer = str(e)
    _memo.put(key, answer)
    if isinstance(answer, str):
        raise SelectorError(answer)
    return answer, True


def forget() -> None:
    """Empty the memo of evaluations (what a cold start has; benchmarks measure it)."""
    _memo.clear()


def memoized() -> int:
    """How many answers the memo holds (within :data:`ANSWERS_MEMO_BYTES`)."""
    return len(_memo)


def known(expression: str, device: DeviceView) -> bool | None:
    """The memo's answer for ``expression`` on ``device`` (as :func:`evaluate` keys it),
    None when it holds none; raises :class:`SelectorError` when it holds the error."""
    found = _memo.get((_compiled(expression).ident, project(expression, device)))
    if isinstance(found, str):
        raise SelectorError(found)
    return found


def matches(expression: str, device: DeviceView) -> bool:
    """Whether the selector ``expression`` accepts ``device``. Raises
    :class:`SelectorError` (quoting the expression) when it does not compile, costs more
    than :data:`MAX_COST`, fails to evaluate (an unknown function, a missing attribute the
    expression does not guard) or yields a non-boolean."""
    return evaluate(expression, device)[0]


def _evaluated(expression: str, device: DeviceView) -> bool:
    """One evaluation of ``expression`` on ``device``, unmemoized."""
    driver, attributes, capacity = device
    activation = {"device": celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("attributes"): _grouped(driver, attributes, _cel),
        celtypes.StringType("capacity"): _grouped(driver, capacity,
                                                  lambda v: Quantity(_text(v), v)),
        celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(False),
    })}
    try:
        result = _program(expression).evaluate(activation)
    except SelectorError:
        raise
    except Exception as e:  # noqa: BLE001
        raise SelectorError(f"CEL selector {expression!r} cannot be evaluated: {_short(e)}") from None
    if isinstance(result, celpy.evaluation.CELEvalError):
        raise SelectorError(f"CEL selector {expression!r} cannot be evaluated: {_short(result)}")
    if not isinstance(result, bool | celtypes.BoolType):
        raise SelectorError(f"CEL selector {expression!r} yields {type(result).__name__}, not a boolean")
    return bool(result)


def _text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def view(driver: str, attributes: Mapping[str, Any], capacity: Mapping[str, Fraction]) -> DeviceView:
    """The hashable :data:`DeviceView` of a device."""
    return (driver, tuple(sorted(attributes.items())), tuple(sorted(capacity.items())))
