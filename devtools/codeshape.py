"""The shape of the shipped code, read from its syntax tree (nothing is imported).

    python -m devtools.codeshape        (what ``make lint`` runs)

- **Functions**: none over :data:`MAX_FUNCTION_LINES` lines unless its docstring says why
  (a sentence with the words "Long because"); ``tests/test_code_shape.py`` holds the
  shipped packages to it.
- **Modules**: a module over :data:`MODULE_LINES_WARNING` lines is a smell, not an error:
  this command prints a warning per such module and exits 0. A module is split where its
  concern changes, never to fit a number (docs/decisions/045-engine-rooms.md).

A function's length runs from its ``def`` line to its last line (decorators left out),
nested functions and methods included.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The packages that ship (in the images and the wheel).
SHIPPED = ("troupe", "webhook", "certs", "reconciler")
MODULE_LINES_WARNING = 500
MAX_FUNCTION_LINES = 60
#: What a long function's docstring must say.
REASON = "Long because"


def shipped_modules(root: Path = ROOT) -> Iterator[Path]:
    """Every ``.py`` file of the shipped packages under ``root``, sorted."""
    for package in SHIPPED:
        yield from sorted((root / package).rglob("*.py"))


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


def long_modules(paths: Sequence[Path], root: Path = ROOT) -> list[str]:
    """A warning for each module of ``paths`` over :data:`MODULE_LINES_WARNING` lines:
    ``reconciler/x.py: 512 lines (over 500): ...``."""
    out = []
    for path in paths:
        lines = len(path.read_text().splitlines())
        if lines > MODULE_LINES_WARNING:
            out.append(f"{path.relative_to(root).as_posix()}: {lines} lines (over {MODULE_LINES_WARNING}): "
                       "a smell; split it where its concern changes, if it has one")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Print a warning per long shipped module (module docstring); always 0."""
    if argv:
        print(__doc__, file=sys.stderr)
        return 0 if argv[0] in ("-h", "--help") else 2
    for warning in long_modules(list(shipped_modules())):
        print(f"warning: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
