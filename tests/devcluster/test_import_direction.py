"""The modules of devtools/devcluster import each other in one direction: the Go toolchain
basics at the bottom, the workload controllers' build on them, the control plane's build on
both, the cluster on the build, and running the controllers on the cluster. Every import
counts, including those inside functions and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

import devtools.devcluster

PACKAGE = "devtools.devcluster"
DIRECTORY = Path(devtools.devcluster.__file__).resolve().parent
MODULES = sorted(path.stem for path in DIRECTORY.glob("*.py") if path.stem not in ("__init__", "__main__"))


def _imported(module: str) -> set[str]:
    """The devcluster modules that ``module`` imports anywhere in its source."""
    tree = ast.parse((DIRECTORY / f"{module}.py").read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = PACKAGE if node.level else (node.module or "")
            if node.level and node.module:
                base = f"{PACKAGE}.{node.module}"
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(PACKAGE + "."):
                head = name.removeprefix(PACKAGE + ".").split(".")[0]
                if head in MODULES:
                    out.add(head)
    out.discard(module)
    return out


def test_the_build_the_cluster_and_the_workloads_import_in_one_direction():
    edges = {module: _imported(module) for module in MODULES}
    assert edges["toolchain"] == set()
    assert edges["controllers"] == {"toolchain"}
    assert edges["build"] == {"toolchain", "controllers"}
    assert edges["kueue"] == {"toolchain", "controllers"}
    assert edges["kuberay"] == {"toolchain"}
    assert "build" in edges["cluster"] and not edges["cluster"] & {"workloads", "controllers", "toolchain"}
    assert {"cluster", "controllers"} <= edges["workloads"]
    assert {"cluster", "kueue", "workloads"} <= edges["quota"]
    assert {"cluster", "kuberay", "workloads"} <= edges["rayoperator"]


def test_no_devcluster_module_imports_one_that_imports_it_back():
    edges = {module: _imported(module) for module in MODULES}
    ordered: list[str] = []
    remaining = dict(edges)
    while remaining:
        ready = sorted(m for m, deps in remaining.items() if deps <= set(ordered))
        assert ready, f"import cycle among {sorted(remaining)}: {remaining}"
        ordered += ready
        for module in ready:
            del remaining[module]
