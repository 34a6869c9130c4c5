"""The shape of the shipped code (:mod:`devtools.codeshape`): no function over 60 lines
unless its docstring says why it is long; no private name taken from another module; a
module over 500 lines is only a warning, which ``make lint`` prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.codeshape import (
    MAX_FUNCTION_LINES,
    MODULE_LINES_WARNING,
    REASON,
    ROOT,
    SHIPPED,
    long_functions,
    long_modules,
    main,
    private_imports,
    shipped_module_names,
    shipped_modules,
)

MODULES = list(shipped_modules())
NAMES = shipped_module_names()


def test_the_shipped_packages_are_found() -> None:
    assert len(MODULES) > 50
    assert {p.relative_to(ROOT).parts[0] for p in MODULES} == set(SHIPPED)


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


def test_no_shipped_module_takes_a_private_name_of_another() -> None:
    taken = [f"{path.relative_to(ROOT).as_posix()}:{found}" for path in MODULES for found in private_imports(path, NAMES)]
    assert not taken, f"give these a public name where they are defined: {', '.join(taken)}"


def test_a_private_name_taken_from_another_module_is_found_in_every_form(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "model.py", "sub/__init__.py"):
        (package / name).write_text("")
    (package / "model.py").write_text("_keys = {}\n\n\ndef _helper():\n    return _keys\n")
    user = package / "sub" / "user.py"
    user.write_text("import pkg.model\n"
                    "import pkg.model as m\n"
                    "from pkg import model\n"
                    "from pkg.model import _keys\n"
                    "from .. import model as up\n"
                    "from ..model import _helper\n"
                    "\n"
                    "a = pkg.model._keys\n"
                    "b = m._helper()\n"
                    "c = model._keys\n"
                    "d = up._keys\n"
                    "e = m.__name__, _keys, _helper, object()._private\n")
    names = frozenset({"pkg", "pkg.model", "pkg.sub", "pkg.sub.user"})
    assert sorted(private_imports(user, names, tmp_path)) == sorted([
        "4: pkg.model._keys", "6: pkg.model._helper", "8: pkg.model._keys", "9: pkg.model._helper",
        "10: pkg.model._keys", "11: pkg.model._keys"])
    assert list(private_imports(package / "model.py", names, tmp_path)) == [], "a module's own names are its own"


def test_a_long_module_is_a_warning_not_a_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "reconciler").mkdir()
    long, short = tmp_path / "reconciler" / "long.py", tmp_path / "reconciler" / "short.py"
    long.write_text("x = 1\n" * (MODULE_LINES_WARNING + 1))
    short.write_text("x = 1\n" * MODULE_LINES_WARNING)
    assert long_modules([long, short], tmp_path) == [
        f"reconciler/long.py: {MODULE_LINES_WARNING + 1} lines (over {MODULE_LINES_WARNING}): "
        "a smell; split it where its concern changes, if it has one"]
    assert main([]) == 0
    assert main(["--help"]) == 0
    assert "python -m devtools.codeshape" in capsys.readouterr().err


def test_the_readme_names_the_engines_rooms_as_the_layers_contract_orders_them() -> None:
    """A newcomer finds the engine's rooms in the README's layer table; the order there is
    the one import-linter enforces (pyproject.toml), bottom-up, and every room is a package."""
    import re
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [engine] = [c for c in contracts if c.get("containers") == ["reconciler.engine"]]
    rooms = list(reversed(engine["layers"]))
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| engine |"))
    named = [name for name in re.findall(r"`(\w+)/`", row) if name in rooms or (ROOT / "reconciler/engine" / name).is_dir()]
    assert named == rooms
    assert all((ROOT / "reconciler" / "engine" / room / "__init__.py").exists() for room in rooms)
