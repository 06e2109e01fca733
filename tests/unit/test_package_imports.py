"""Package hygiene, checked on the source: every module of bcgprof imports on its own, in an
interpreter that has loaded no other bcgprof module (no module relies on another having
been imported first, no import cycle breaks an import); the module-level import graph,
imports under ``if TYPE_CHECKING`` included, has no cycle; no module imports another
module's private (underscore) names; and no module is longer than 600 lines.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from children import Command
from helpers import syntax_nodes, syntax_tree

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bcgprof"

# bcgprof.__main__ runs the CLI when imported; bcgprof.cli, all it does, is imported on its own.
NOT_IMPORTED = {"bcgprof.__main__"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


# One fresh interpreter loads torch (about 1.3 s, the bulk of any import here) and then
# forks a child per module, as many at once as there are CPUs; each child starts with no
# bcgprof module loaded and imports exactly one. A fresh interpreter per module would cost
# that 1.3 s forty times over.
_IMPORT_EACH = r"""
import importlib, json, os, sys, traceback
import torch  # noqa: F401  (loaded once, before any fork)
assert not [m for m in sys.modules if m == "bcgprof" or m.startswith("bcgprof.")]
failures, running = {}, {}

def reap():
    pid, status = os.wait()
    name, read = running.pop(pid)
    with os.fdopen(read, "rb") as f:
        message = f.read().decode()
    if status != 0:
        failures[name] = message or f"exit status {status}"

for name in sys.argv[1:]:
    if len(running) >= (os.cpu_count() or 1):
        reap()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            code = 0
        except BaseException:
            os.write(write, traceback.format_exc().encode()[-60000:])  # within the pipe's buffer
            code = 1
        os._exit(code)
    os.close(write)
    running[pid] = (name, read)
while running:
    reap()
print(json.dumps(failures))
"""


def _modules() -> list[str]:
    return sorted(set(_sources()) - NOT_IMPORTED)


# run ahead of its test (tests/children.py)
CHILDREN = {
    "import-each": lambda folder: Command(
        [sys.executable, "-c", _IMPORT_EACH, *_modules()], cwd=ROOT, timeout=300
    )
}


@pytest.mark.prestart("import-each")
def test_every_module_imports_on_its_own(prestarted):
    names = _modules()
    assert "bcgprof.models.layers.attention" in names and len(names) > 30
    done, _ = prestarted("import-each")
    assert done.args[3:] == names  # every module
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert failures == {}, "\n\n".join(f"{name}:\n{tb}" for name, tb in failures.items())


def _imports(node: ast.AST, known: set[str]) -> list[tuple[str, list[str]]]:
    """(bcgprof module imported, the names taken from it) for one import statement."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names if a.name.split(".")[0] == "bcgprof"]
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "bcgprof":
        submodules = [a.name for a in node.names if f"{node.module}.{a.name}" in known]
        return [(node.module, [a.name for a in node.names if a.name not in submodules])] + [
            (f"{node.module}.{name}", []) for name in submodules
        ]
    return []


class _ModuleLevel(ast.NodeVisitor):
    """A module's import statements outside functions (those inside run later): the ones it runs
    when imported, and those under ``if TYPE_CHECKING`` (a cycle through them never breaks an
    import, but it is still a knot between the modules)."""

    def __init__(self) -> None:
        self.found: list[ast.stmt] = []

    def visit_FunctionDef(self, node: ast.AST) -> None:
        pass

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.stmt) -> None:
        self.found.append(node)

    visit_ImportFrom = visit_Import


def test_module_level_imports_have_no_cycle():
    sources = _sources()
    known = set(sources)
    graph: dict[str, set[str]] = {}
    for module, path in sources.items():
        visitor = _ModuleLevel()
        visitor.visit(syntax_tree(path.read_text()))
        graph[module] = {
            target
            for node in visitor.found
            for target, _ in _imports(node, known)
            if target in known and target != module
        }
    assert graph["bcgprof.models.gpt_oss"] >= {"bcgprof.models.stack", "bcgprof.models.layers.moe"}

    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                raise AssertionError(
                    "import cycle: " + " -> ".join([*path[path.index(target) :], target])
                )
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(sources: dict[str, str]) -> set[tuple[str, str, str]]:
    """(importing module, imported module, private name) for each private name a module of
    ``sources`` ({module name: source text}) imports from another, or reads through an
    imported module (``alias._name``)."""
    known = set(sources)
    found = set()
    for module, text in sources.items():
        aliases: dict[str, str] = {}  # local name -> the bcgprof module it is bound to
        for node in syntax_nodes(text):
            for target, names in _imports(node, known):
                if target != module:
                    found |= {(module, target, name) for name in names if _private(name)}
            if isinstance(node, ast.Import):
                aliases.update(
                    {a.asname: a.name for a in node.names if a.name in known and a.asname}
                )
            elif isinstance(node, ast.ImportFrom) and node.module:
                aliases.update(
                    {
                        a.asname or a.name: f"{node.module}.{a.name}"
                        for a in node.names
                        if f"{node.module}.{a.name}" in known
                    }
                )
        for node in syntax_nodes(text):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and _private(node.attr)
                and aliases.get(node.value.id, module) != module
            ):
                found.add((module, aliases[node.value.id], node.attr))
    return found


def test_no_module_imports_another_modules_private_names():
    found = private_imports({module: path.read_text() for module, path in _sources().items()})
    assert found == set(), sorted(found)
    assert not [f for f in found if f[0].startswith("bcgprof.models")]


def test_the_private_import_scan_sees_both_forms():
    sources = {
        "bcgprof.a": "_x = 1\ny = 2\n",
        "bcgprof.b": "from bcgprof.a import _x, y\n",
        "bcgprof.c": "def f():\n    from bcgprof import a as mod\n    return mod._x + mod.y\n",
        "bcgprof.d": "import bcgprof.a as a\na.y\n",
    }
    assert private_imports(sources) == {
        ("bcgprof.b", "bcgprof.a", "_x"),
        ("bcgprof.c", "bcgprof.a", "_x"),
    }


MAX_MODULE_LINES = 600  # one job per module: a module past this does several


def test_no_module_is_over_the_line_limit():
    long = {
        name: n
        for name, path in _sources().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"
