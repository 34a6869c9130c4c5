"""Kubernetes resource quantities (``500m``, ``1Gi``, ``1e3``, ``1E``), parsed exactly.

The grammar is apimachinery's ``resource.ParseQuantity``::

    <quantity>  ::= <sign>? <number> <suffix>?
    <number>    ::= <digits> | <digits> "." <digits>? | "." <digits>
    <suffix>    ::= Ki | Mi | Gi | Ti | Pi | Ei          (powers of 1024)
                  | n | u | m | k | M | G | T | P | E    (powers of 1000)
                  | (e | E) <sign>? <digits>            (a power of ten)

``1E`` is one exa (10**18); ``1E3`` and ``1e3`` are 1000. Values are kept as
:class:`fractions.Fraction`, so sums are exact, and converted to the integer units
kube-scheduler compares at the end (:func:`to_units`): millicores for ``cpu``
(``Quantity.MilliValue``), whole units for everything else (``Quantity.Value``); both
round up, away from zero, as Kubernetes does.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from troupe.errors import quoted

_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
#: Exponents beyond this are refused rather than allocated as huge integers.
_MAX_EXPONENT = 1000
#: Longest quantity read, in characters. A quantity the API server keeps is canonical and
#: far shorter (an int64 and a suffix); this bounds the work (``int()`` refuses more than
#: 4,300 digits with a ``ValueError``) and what the parse cache holds.
MAX_LENGTH = 64

#: The resource measured in millicores; every other resource is counted in whole units.
CPU = "cpu"


class QuantityError(ValueError):
    """A value is not a Kubernetes quantity. The message quotes the value."""


def parse_quantity(value: str | int | float | Decimal) -> Fraction:
    """The exact value of a quantity: ``"500m"`` -> ``Fraction(1, 2)``.

    Accepts what a YAML or JSON document may hold: a string, an int or a float (a float is
    read through its shortest ``repr``, so ``0.1`` is exactly one tenth). Raises
    :class:`QuantityError` for anything else, for booleans and for malformed strings
    (``"1K"``, ``"1e"``, ``"abc"``, ``""``).
    """
    if type(value) is str:  # the usual case first
        return _parse(value)
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}: not a number")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"invalid quantity {value!r}: not finite")
        return _parse(repr(value))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise QuantityError(f"invalid quantity {value!r}: not finite")
        return Fraction(value)
    if isinstance(value, str):
        return _parse(value)
    raise QuantityError(f"invalid quantity {value!r}: expected a string or a number")


@lru_cache(maxsize=4096)
def _parse(text: str) -> Fraction:
    if len(text) > MAX_LENGTH:
        raise QuantityError(f"invalid quantity {quoted(text)}: longer than {MAX_LENGTH} characters")
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise QuantityError(f"invalid quantity {quoted(text)}")
    whole, _, frac = m["number"].partition(".")
    amount = Fraction(int((whole or "0") + frac), 10 ** len(frac))
    if m["binary"]:
        amount *= 1024 ** _BINARY[m["binary"]]
    elif m["decimal"]:
        amount *= Fraction(10) ** _DECIMAL[m["decimal"]]
    elif m["exponent"]:
        exponent = int(m["exponent"])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"invalid quantity {text!r}: exponent out of range")
        amount *= Fraction(10) ** exponent
    return -amount if m["sign"] == "-" else amount


def to_units(resource: str, value: Fraction) -> int:
    """``value`` in the integer unit kube-scheduler compares for ``resource``.

    ``cpu`` in millicores (``100u`` -> 1, ``1.5`` -> 1500), anything else in whole units
    (``1.5`` bytes -> 2), rounding away from zero as ``MilliValue``/``Value`` do.
    """
    # Integer arithmetic on the fraction's terms: exact, and much faster than Fraction's.
    n, d = value.numerator, value.denominator
    if resource == CPU:
        n *= 1000
    return -(-n // d) if n >= 0 else n // d


def format_units(resource: str, units: int) -> str:
    """A readable form of :func:`to_units`' result: ``cpu`` 1500 -> ``1500m``."""
    return f"{units}m" if resource == CPU else str(units)
