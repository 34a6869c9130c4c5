"""The shape of the shipped code (issue 21, "Done when"): no module of the shipped packages
over 500 lines, and no function over 60 lines unless its docstring says why it is long
(a sentence with the words "Long because").

Read from the source's syntax tree; nothing is imported. A function's length runs from its
``def`` line to its last line (decorators left out), nested functions and methods included.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The packages that ship (in the images and the wheel).
SHIPPED = ("troupe", "webhook", "certs", "reconciler")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
#: What a long function's docstring must say.
REASON = "Long because"

def shipped_modules() -> Iterator[Path]:
    """Every ``.py`` file of the shipped packages, sorted."""
    for package in SHIPPED:
        yield from sorted((ROOT / package).rglob("*.py"))


def long_functions(path: Path) -> Iterator[str]:
    """``name:line (n lines)`` of each function in ``path`` over the limit without a reason."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        assert node.end_lineno is not None
        length = node.end_lineno - node.lineno + 1
        if length > MAX_FUNCTION_LINES and REASON not in (ast.get_docstring(node) or ""):
            yield f"{node.name}:{node.lineno} ({length} lines)"


MODULES = list(shipped_modules())


def test_the_shipped_packages_are_found() -> None:
    assert len(MODULES) > 50
    assert {p.relative_to(ROOT).parts[0] for p in MODULES} == set(SHIPPED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_module_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{lines} lines: split it along its seams"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_function_is_over_60_lines_without_a_reason(path: Path) -> None:
    long = list(long_functions(path))
    assert not long, f"split them, or say why in their docstring ({REASON} ...): {', '.join(long)}"


def test_a_long_function_without_a_reason_is_found(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    module = tmp_path / "m.py"
    module.write_text(f'def short():\n    """Short."""\n\n\ndef long():\n    """Too long."""\n{body}\n\n\n'
                      f'def explained():\n    """{REASON} it must be.\n    """\n{body}\n')
    assert list(long_functions(module)) == [f"long:5 ({MAX_FUNCTION_LINES + 2} lines)"]
