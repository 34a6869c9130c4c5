"""The image installs exactly the locked dependency set: requirements.lock pins every runtime
dependency of pyproject.toml (and all they need) to one version with sha256 hashes, and the
Dockerfile installs that file and nothing else, hash-checked, from a pinned base."""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"
#: The packages the image runs (the Dockerfile copies these and nothing else of the repository).
SHIPPED = ("troupe", "webhook", "reconciler", "certs")


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) from requirements.lock."""
    out: dict[str, tuple[str, list[str]]] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text()):
        first = entry.splitlines()[0]
        if first.startswith("#") or not first.strip():
            continue
        name, _, version = first.split(" ")[0].partition("==")
        out[canonicalize_name(name)] = (version, re.findall(r"--hash=sha256:([0-9a-f]{64})", entry))
    return out


def test_every_runtime_dependency_is_pinned_in_the_lock_within_its_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = locked()

    for spec in project["dependencies"]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in requirements.lock: run `make lock`"
        assert requirement.specifier.contains(pins[name][0]), (
            f"requirements.lock pins {requirement.name}=={pins[name][0]}, outside {requirement.specifier}: run `make lock`")


def test_every_locked_package_has_an_exact_version_and_hashes() -> None:
    pins = locked()

    assert len(pins) >= 20
    for name, (version, hashes) in pins.items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), f"{name}: not an exact version: {version!r}"
        assert hashes, f"{name}=={version} has no hash"


def test_the_dockerfile_installs_the_lock_hash_checked_from_a_pinned_base() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()

    bases = re.findall(r"^FROM (\S+)", dockerfile, flags=re.M)
    assert bases and all(re.search(r"(:\d+\.\d+\.\d+\S*|@sha256:[0-9a-f]{64})$", b) for b in bases), bases
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs == [next(line for line in installs if "--require-hashes" in line and "-r requirements.lock" in line
                             and "--no-deps" in line)]


def imported_top_level_modules() -> set[str]:
    """Every top-level module that the shipped packages import (absolute imports)."""
    modules: set[str] = set()
    for package in SHIPPED:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    modules.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
    return modules


def test_every_runtime_dependency_is_imported_by_the_code_the_image_ships() -> None:
    """A package only the tests import belongs to the test extra, not to the image's lock."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    distributions = packages_distributions()
    imported = {canonicalize_name(d) for m in imported_top_level_modules() for d in distributions.get(m, [])}

    unused = [spec for spec in project["dependencies"] if canonicalize_name(Requirement(spec).name) not in imported]

    assert not unused, f"runtime dependencies no shipped module imports (move them to an extra): {unused}"
