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
takes about half a millisecond per evaluation, and devices change rarely.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes

from reconciler.engine.model.quantity import QuantityError, parse_quantity

#: One device as a selector sees it: ``(driver, attributes, capacity)`` with attributes
#: ``((qualified name, value), ...)`` (value: int, bool or str) and capacity ``((qualified
#: name, Fraction), ...)``, both sorted: hashable, so evaluations are memoized.
DeviceView = tuple[str, tuple[tuple[str, Any], ...], tuple[tuple[str, Fraction], ...]]


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


@functools.lru_cache(maxsize=1024)
def _program(expression: str) -> Any:
    env = celpy.Environment()
    try:
        return env.program(env.compile(expression), functions=_FUNCTIONS)
    except Exception as e:  # noqa: BLE001  cel-python raises its own and parser errors alike
        raise SelectorError(f"CEL selector {expression!r} does not compile: {_short(e)}") from None


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


def check(expression: str) -> None:
    """Raise :class:`SelectorError` if ``expression`` does not compile."""
    _program(expression)


@functools.lru_cache(maxsize=262_144)
def matches(expression: str, device: DeviceView) -> bool:
    """Whether the selector ``expression`` accepts ``device``. Raises
    :class:`SelectorError` (quoting the expression) when it does not compile, fails to
    evaluate (an unknown function, a missing attribute the expression does not guard) or
    yields a non-boolean."""
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
