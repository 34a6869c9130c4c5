"""Quantities are parsed exactly, as apimachinery does, and rounded up as kube-scheduler does."""

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as kube_parse

from reconciler.engine.model.quantity import QuantityError, format_units, parse_quantity, to_units

PARSE_CASES = [
    ("millicores", "500m", Fraction(1, 2)),
    ("a binary suffix", "1Gi", Fraction(1024**3)),
    ("kibibytes", "100Ki", Fraction(102400)),
    ("a decimal exponent", "1e3", Fraction(1000)),
    ("an upper-case exponent", "1E3", Fraction(1000)),
    ("a signed exponent", "25e-2", Fraction(1, 4)),
    ("E alone is exa, not an exponent", "1E", Fraction(10**18)),
    ("a plain fraction", "1.5", Fraction(3, 2)),
    ("a lower-case k", "2k", Fraction(2000)),
    ("nano", "5n", Fraction(5, 10**9)),
    ("micro", "100u", Fraction(1, 10**4)),
    ("a leading dot", ".5", Fraction(1, 2)),
    ("a trailing dot", "5.", Fraction(5)),
    ("a plus sign", "+3", Fraction(3)),
    ("a minus sign", "-2Mi", Fraction(-2 * 1024**2)),
    ("an int from YAML", 4, Fraction(4)),
    ("a float from YAML read through its repr", 0.1, Fraction(1, 10)),
    ("a Decimal", Decimal("2.5"), Fraction(5, 2)),
]


@pytest.mark.parametrize(("case", "text", "want"), PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_a_quantity_parses_to_its_exact_value(case, text, want):
    assert parse_quantity(text) == want


BAD = [
    ("upper-case K is not a suffix", "1K"),
    ("e needs digits", "1e"),
    ("ki is not binary", "1ki"),
    ("no number", "Mi"),
    ("empty", ""),
    ("two dots", "1.2.3"),
    ("spaces", "1 Gi"),
    ("words", "abc"),
    ("a boolean from YAML", True),
    ("a list", [1]),
    ("infinity", float("inf")),
    ("an absurd exponent", "1e99999"),
]


@pytest.mark.parametrize(("case", "text"), BAD, ids=[c[0] for c in BAD])
def test_a_malformed_quantity_is_refused_with_the_value_quoted(case, text):
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(text)


ROUNDING = [
    ("cpu is counted in millicores", "cpu", "1.5", 1500),
    ("a fraction of a millicore rounds up", "cpu", "100u", 1),
    ("half a millicore rounds up", "cpu", "0.5m", 1),
    ("memory rounds up to a byte", "memory", "1.5", 2),
    ("memory with a binary suffix", "memory", "1Gi", 1024**3),
    ("a GPU count", "nvidia.com/gpu", "8", 8),
    ("exa bytes", "ephemeral-storage", "1E", 10**18),
    ("negative amounts round away from zero", "memory", "-1.5", -2),
]


@pytest.mark.parametrize(("case", "resource", "text", "want"), ROUNDING, ids=[c[0] for c in ROUNDING])
def test_amounts_become_the_units_kube_scheduler_compares(case, resource, text, want):
    assert to_units(resource, parse_quantity(text)) == want


def test_units_are_shown_with_millicores_for_cpu():
    assert format_units("cpu", 1500) == "1500m"
    assert format_units("memory", 1024) == "1024"


_NUMBER = st.one_of(
    st.from_regex(r"\A[0-9]{1,6}\Z"),
    st.from_regex(r"\A[0-9]{1,3}\.[0-9]{1,3}\Z"),
    st.from_regex(r"\A\.[0-9]{1,4}\Z"),
)
_SUFFIX = st.one_of(
    st.sampled_from(["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]),
    st.integers(-12, 12).map(lambda e: f"e{e}"),
    st.integers(0, 12).map(lambda e: f"E{e}"),
)


@settings(max_examples=300, deadline=None)
@given(number=_NUMBER, suffix=_SUFFIX)
def test_every_valid_quantity_agrees_with_the_kubernetes_client(number, suffix):
    text = number + suffix
    assert parse_quantity(text) == Fraction(kube_parse(text))
