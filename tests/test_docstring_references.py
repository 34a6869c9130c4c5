"""Every code object a shipped docstring or comment names in a Sphinx role exists.

``:mod:`reconciler.engine.ledger.snapshot```, ``:func:`~.decide.decide```,
``:meth:`Snapshot.assumed```: a reference is resolved as Python would find the name from
the module that writes it: in that module's namespace (what it defines or imports), then
relative to its package for a reference starting with ``.`` (``.x`` is a sibling module,
``..x`` one up), then as an absolute dotted path. A module, class, function, method,
attribute or constant that moved, was renamed or was removed leaves a reference no reader
can follow; this test names each one.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from devtools.codeshape import ROOT, shipped_modules

#: A Sphinx cross-reference role: ``:func:`~a.b``` (the ``~`` only shortens its display).
ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc|obj):`~?([A-Za-z_.][A-Za-z0-9_.]*)`")


def module_name(path: Path) -> str:
    """``reconciler/engine/__init__.py`` -> ``reconciler.engine``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def instance_attributes(cls: type) -> frozenset[str]:
    """The names a class's methods assign on ``self`` (``self.version = 0``), and its
    dataclass fields and slots: attributes its instances have that the class object does
    not."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__ == "builtins":
            continue
        names.update(getattr(klass, "__dataclass_fields__", {}), getattr(klass, "__annotations__", {}))
        slots = getattr(klass, "__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        names.update(re.findall(r"self\.([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=\n]*)?=", source))
    return frozenset(names)


@functools.cache
def class_members(module: ModuleType) -> frozenset[str]:
    """What the classes a module defines offer by name: a reference written inside a
    class's docstring (``:meth:`done```) names a member of that class, as Sphinx reads it."""
    names: set[str] = set()
    for value in vars(module).values():
        if isinstance(value, type) and value.__module__ == module.__name__:
            names.update(dir(value), instance_attributes(value))
    return frozenset(names)


def _attr_chain(base: object, names: list[str]) -> bool:
    for name in names:
        if isinstance(base, ModuleType) and not hasattr(base, name):
            try:
                base = importlib.import_module(f"{base.__name__}.{name}")
                continue
            except ImportError:
                return False
        if hasattr(base, name):
            base = getattr(base, name)
            continue
        # An instance's attribute ends the chain: there is no class attribute to follow.
        return isinstance(base, type) and name in instance_attributes(base)
    return True


def _absolute(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _attr_chain(module, parts[cut:])
    return False


def resolves(reference: str, module: ModuleType, package: str) -> bool:
    """Whether ``reference`` names something, read from ``module`` (module docstring)."""
    if reference.startswith("."):
        dots = len(reference) - len(reference.lstrip("."))
        base = package.rsplit(".", dots - 1)[0] if dots > 1 else package
        return _absolute(f"{base}.{reference.lstrip('.')}")
    head, *rest = reference.split(".")
    if hasattr(module, head) and _attr_chain(getattr(module, head), rest):
        return True
    if not rest and (head in class_members(module) or hasattr(builtins, head)):
        return True
    return _absolute(reference)


def references(path: Path) -> Iterator[str]:
    """Every role reference in ``path`` (docstrings and comments alike)."""
    yield from ROLE.findall(path.read_text())


MODULES = list(shipped_modules())


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_name_a_docstring_gives_exists(path: Path) -> None:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    # A __main__ module runs its command when imported: its names are read from its package.
    module = importlib.import_module(package if path.name == "__main__.py" else name)
    broken = sorted({ref for ref in references(path) if not resolves(ref, module, package)})
    assert not broken, f"names nothing (moved, renamed or gone?): {', '.join(broken)}"


def test_a_reference_to_something_gone_is_found(tmp_path: Path) -> None:
    import reconciler.engine.ledger.snapshot as snapshot

    assert resolves("Snapshot.assumed", snapshot, "reconciler.engine.ledger")
    assert resolves(".topology.TopologyTree", snapshot, "reconciler.engine.ledger")
    assert resolves("..model.pods.PodInfo.key", snapshot, "reconciler.engine.ledger")
    assert resolves("reconciler.engine.placement.place.place_gang", snapshot, "reconciler.engine.ledger")
    assert not resolves("Snapshot.reasons", snapshot, "reconciler.engine.ledger")
    assert not resolves(".snapshot.Snapshot.gone", snapshot, "reconciler.engine.ledger")
    assert not resolves("reconciler.engine.gang.build_gang", snapshot, "reconciler.engine.ledger")
