"""The engine is pure: it imports only the standard library's pure modules, itself, and
the contract layer (no Kubernetes client, no I/O, no clock, no randomness). ``datetime``
is there to read timestamps; the clock reaches the engine only as ``now`` arguments, and no
engine module calls ``now()`` or ``time()`` (checked below)."""

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "reconciler" / "engine"
ALLOWED_STDLIB = {
    "__future__", "bisect", "collections", "contextlib", "copy", "dataclasses", "datetime", "decimal",
    "enum", "fractions", "functools", "hashlib", "heapq", "itertools", "json", "math", "operator", "re",
    "typing",
}
ALLOWED_PROJECT = ("reconciler.engine", "troupe.contract", "troupe.config", "troupe.ranks", "troupe.kueue")
#: Third-party libraries that compute without I/O: cel-python evaluates DRA device selectors
#: (reconciler/engine/model/cel.py), as the issue asks for a well-kept CEL library.
ALLOWED_THIRD_PARTY = {"celpy"}


def imported_modules(source: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append(node.module)
    return out


@pytest.mark.parametrize("module", sorted(p.name for p in ENGINE.glob("*.py")))
def test_an_engine_module_imports_nothing_impure(module):
    for name in imported_modules((ENGINE / module).read_text()):
        top = name.split(".")[0]
        if top in ("reconciler", "troupe"):
            assert name.startswith(ALLOWED_PROJECT), f"{module} imports {name}"
        else:
            assert top in ALLOWED_STDLIB | ALLOWED_THIRD_PARTY, f"{module} imports {name}"


@pytest.mark.parametrize("module", sorted(p.name for p in ENGINE.glob("*.py")))
def test_an_engine_module_never_reads_the_clock(module):
    source = (ENGINE / module).read_text()
    for call in (".now(", ".utcnow(", ".today(", "time.time(", "monotonic("):
        assert call not in source, f"{module} reads the clock ({call})"


def test_the_check_catches_a_forbidden_import():
    assert imported_modules("import kubernetes\nfrom time import time\n") == ["kubernetes", "time"]
