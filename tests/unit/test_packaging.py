"""Packaging: every package of bcgprof/ ships, and every package bcgprof imports is declared.

A test extra once brought in a package the code imported but never declared, so every command
crashed for users while the suite passed; these checks read pyproject.toml and the source, so
they fail whatever the test environment happens to have installed. (CI also installs the package
plainly, without extras, and runs the read commands from outside the checkout.)
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from helpers import syntax_nodes

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# Import name -> distribution name, where they differ.
DISTRIBUTION = {"pynvml": "nvidia-ml-py", "yaml": "pyyaml"}
# Imported only when present, each behind a guard, never needed by a command to start.
OPTIONAL = {
    "cuda": "CUDA Python bindings: graph kernel-node counts where they are installed",
    "triton": "ships with CUDA builds of torch; the fused kernels' CPU reference runs without it",
}


def _declared() -> set[str]:
    names = set()
    for requirement in PYPROJECT["project"]["dependencies"]:
        names.add(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower())
    return names


def _imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (REPO / "bcgprof").rglob("*.py"):
        for node in syntax_nodes(path.read_text()):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "bcgprof" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_imported_package_is_declared():
    declared = _declared()
    undeclared = {
        name: sorted(paths)
        for name, paths in _imports().items()
        if DISTRIBUTION.get(name, name).lower() not in declared and name not in OPTIONAL
    }
    assert undeclared == {}, f"imported but not in [project].dependencies: {undeclared}"


def test_the_optional_imports_are_still_optional_and_used():
    imported = _imports()
    assert set(OPTIONAL) <= set(imported), "an optional import is gone: drop it from OPTIONAL"
    declared = _declared()
    assert not {DISTRIBUTION.get(n, n) for n in OPTIONAL} & declared


def test_no_dependency_is_declared_for_nothing():
    imported = {DISTRIBUTION.get(name, name).lower() for name in _imports()}
    assert _declared() - imported == set()


def test_every_package_directory_ships():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "bcgprof").rglob("__init__.py")
    }
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - on_disk == {"bcgprof.presets"}
    assert PYPROJECT["tool"]["setuptools"]["package-dir"]["bcgprof.presets"] == "configs"
    assert list((REPO / "configs" / "models").glob("*.json")), (
        "the presets ship from configs/models"
    )


def test_the_declared_licence_has_its_file():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]
