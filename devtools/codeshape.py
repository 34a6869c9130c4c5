"""The shape of the shipped code, read from its syntax tree (nothing is imported).

    python -m devtools.codeshape        (what ``make lint`` runs)

- **Functions**: none over :data:`MAX_FUNCTION_LINES` lines unless its docstring says why
  (a sentence with the words "Long because"); ``tests/test_code_shape.py`` holds the
  shipped packages to it.
- **Private names**: a name with a leading underscore stays in its module: no shipped
  module imports one from another shipped module (``from m import _x``) or reads one
  through a module it imported (``m._x``); what another module needs gets a public name
  (:func:`private_imports`; ``tests/test_code_shape.py``).
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


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted name of the module at ``path`` under ``root`` (a package's ``__init__.py``
    is the package): ``reconciler/engine/model/membership.py`` ->
    ``reconciler.engine.model.membership``."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a chain of names and attributes, None for any other expression."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def private_imports(path: Path, modules: frozenset[str], root: Path = ROOT) -> Iterator[str]:
    """``line: module._name`` of each private name (one leading underscore, not a dunder)
    that the module at ``path`` takes from another of ``modules`` (dotted names of the
    shipped modules): ``from module import _name`` (a relative import too), or
    ``module._name`` read through a module it imported (``import a.b``, ``import a.b as m``,
    ``from a import b``). Names read through anything else (an object, a class) are not
    followed: the syntax tree does not say what they are."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    bound: dict[str, str] = {}  # a name bound by an import -> the module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif _private(alias.name) and base in modules and base != here:
                    yield f"{node.lineno}: {base}.{alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        chain = _dotted(node.value)
        if chain is None:
            continue
        first, _, rest = chain.partition(".")
        module = ".".join(filter(None, [bound.get(first), rest])) if first in bound else None
        if module is not None and module in modules and module != here:
            yield f"{node.lineno}: {module}.{node.attr}"


def shipped_module_names(root: Path = ROOT) -> frozenset[str]:
    """The dotted names of every shipped module (:func:`shipped_modules`)."""
    return frozenset(module_name(p, root) for p in shipped_modules(root))


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
    """Print a warning per long shipped module and an error per private name taken from
    another module (module docstring); 1 when there is an error, else 0."""
    if argv:
        print(__doc__, file=sys.stderr)
        return 0 if argv[0] in ("-h", "--help") else 2
    paths = list(shipped_modules())
    for warning in long_modules(paths):
        print(f"warning: {warning}")
    names = shipped_module_names()
    taken = [f"{path.relative_to(ROOT).as_posix()}:{found}" for path in paths for found in private_imports(path, names)]
    for found in taken:
        print(f"error: {found}: a private name of another module (give it a public name there)")
    return 1 if taken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
