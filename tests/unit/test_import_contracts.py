"""The import-layer contracts of .importlinter, checked twice: by ``lint-imports`` where
import-linter is installed, and by a walk of the source's import statements here, so that
the contracts hold without it.

The walk counts what import-linter counts: every import statement of a module, inside
functions and under ``if TYPE_CHECKING`` too, ``from a import b`` as an import of the
module ``a.b`` where there is one (else of ``a``), and an outside package by its top-level
name. Importing a module also runs its packages' ``__init__``; that is the fresh-interpreter
test's part (tests/cli/test_torch_free.py).
"""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
from collections import deque
from pathlib import Path

import pytest

from bcgprof.spec import families

from helpers import syntax_nodes

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bcgprof"
CONFIG = ROOT / ".importlinter"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_sources() -> dict[str, str]:
    """{module name: source text} of every module of bcgprof."""
    return {_module_name(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def _contract(name: str) -> dict[str, list[str]]:
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    section = parser[f"importlinter:contract:{name}"]
    return {key: section[key].split() for key in section}


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> what it imports: bcgprof modules by their full name, anything else by its
    top-level package name."""
    known = set(sources)
    graph: dict[str, set[str]] = {}
    for module, text in sources.items():
        package = module if _is_package(module, known) else module.rpartition(".")[0]
        found: set[str] = set()
        for node in syntax_nodes(text):
            if isinstance(node, ast.Import):
                found |= {a.name if a.name in known else a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's own package upwards
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    found.add(
                        target if target in known else base if base in known else base.split(".")[0]
                    )
        graph[module] = found - {module}
    return graph


def _is_package(module: str, known: set[str]) -> bool:
    return any(m.startswith(module + ".") for m in known)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def chains(graph: dict[str, set[str]], sources: list[str], forbidden: list[str]) -> list[list[str]]:
    """The shortest import chain from each module under ``sources`` to each module under
    ``forbidden`` it reaches (a source inside a forbidden package, or the reverse, is skipped)."""
    found = []
    for source in sources:
        for start in sorted(m for m in graph if _within(m, source)):
            targets = [f for f in forbidden if not (_within(start, f) or _within(f, source))]
            parent: dict[str, str | None] = {start: None}
            queue = deque([start])
            while queue:
                module = queue.popleft()
                hit = next((f for f in targets if _within(module, f)), None)
                if hit is not None:
                    chain: list[str] = []
                    step: str | None = module
                    while step is not None:
                        chain.append(step)
                        step = parent[step]
                    found.append(chain[::-1])
                    targets.remove(hit)
                    continue
                for nxt in sorted(graph.get(module, ())):
                    if nxt not in parent:
                        parent[nxt] = module
                        queue.append(nxt)
    return found


def _shown(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(chain) for chain in found)


def test_lint_imports_keeps_every_contract():
    if shutil.which("lint-imports") is None:
        pytest.skip(
            "import-linter is not installed (pip install import-linter); the walk below checks "
            "the same"
        )
    done = subprocess.run(
        ["lint-imports", "--config", str(CONFIG)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_read_side_reaches_neither_torch_nor_the_model_or_capture_code():
    contract = _contract("read-side")
    graph = import_graph(package_sources())
    missing = [
        m
        for m in contract["source_modules"] + contract["forbidden_modules"]
        if m.startswith("bcgprof") and not any(_within(g, m) for g in graph)
    ]
    assert missing == [], f"{missing} no longer exist; update .importlinter"
    assert {"torch", "bcgprof.models", "bcgprof.measure"} <= set(contract["forbidden_modules"])
    found = chains(graph, contract["source_modules"], contract["forbidden_modules"])
    assert found == [], "the read side reaches forbidden modules:\n" + _shown(found)


def test_the_model_code_builds_on_the_spec_and_never_the_reverse():
    layers = _contract("model-spec-layers")["layers"]
    graph = import_graph(package_sources())
    found = [c for low in range(1, len(layers)) for c in chains(graph, [layers[low]], layers[:low])]
    assert found == [], "a lower layer imports a higher one:\n" + _shown(found)
    # models does build on spec
    assert "bcgprof.spec" in graph["bcgprof.models.args"] | graph["bcgprof.models"]


def test_no_family_imports_another_family_the_registry_knows():
    modules = [f.module for f in families().values()]
    graph = import_graph(package_sources())
    assert all(m in graph for m in modules)
    found = [c for m in modules for c in chains(graph, [m], [o for o in modules if o != m])]
    assert found == [], "\n" + _shown(found)


def test_the_walk_follows_lazy_type_checking_and_submodule_imports():
    sources = {
        "bcgprof": "",
        "bcgprof.a": "def f():\n    from bcgprof import b\n",
        "bcgprof.b": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bcgprof.c import X\n"
        ),
        "bcgprof.c": "import torch.nn as nn\n",
        "bcgprof.d": "from . import c\n",
        "bcgprof.m": "",
        "bcgprof.m.x": "import bcgprof.m.y\n",
        "bcgprof.m.y": "import os\n",
    }
    graph = import_graph(sources)
    assert graph["bcgprof.a"] == {"bcgprof.b"} and graph["bcgprof.b"] == {"typing", "bcgprof.c"}
    assert graph["bcgprof.c"] == {"torch"} and graph["bcgprof.d"] == {"bcgprof.c"}
    assert chains(graph, ["bcgprof.a"], ["torch"]) == [
        ["bcgprof.a", "bcgprof.b", "bcgprof.c", "torch"]
    ]
    assert chains(graph, ["bcgprof.m"], ["os", "bcgprof.c"]) == [
        ["bcgprof.m.x", "bcgprof.m.y", "os"],
        ["bcgprof.m.y", "os"],
    ]
    # inside a forbidden package: skipped
    assert chains(graph, ["bcgprof.m"], ["bcgprof.m.y"]) == []


def test_a_lazy_import_of_the_model_code_on_the_read_side_is_caught():
    contract = _contract("read-side")
    sources = package_sources()
    sources["bcgprof.analysis.gate"] += (
        "\n\ndef _late():\n    from bcgprof.models.stack import DecoderModel\n"
    )
    found = chains(import_graph(sources), contract["source_modules"], contract["forbidden_modules"])
    assert ["bcgprof.analysis.gate", "bcgprof.models.stack"] in found
    # all through it
    assert all(chain[-2:] == ["bcgprof.analysis.gate", "bcgprof.models.stack"] for chain in found)
