"""Shared by the CPU tests (importable by name: pytest puts tests/ on sys.path): the generators
under tests/data/ and the scripts the tests check, loaded as modules, and the check of a command
that refused its input."""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


@functools.cache
def load_script(path: str) -> ModuleType:
    """A Python file outside any package (``tests/data/make_reports.py``,
    ``benchmarks/gpu/same_figures.py``), by its path from the repository's root, as the module named
    after the file; loaded once."""
    name = Path(path).stem
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@functools.cache
def syntax_tree(text: str) -> ast.Module:
    """The syntax tree of Python source text, parsed once a session for each text: the checks of
    the package's source (its imports, layers, private names, declared dependencies) each read
    every module, and parsing them all takes most of a check. Shared: readers must not change it."""
    return ast.parse(text)


@functools.cache
def syntax_nodes(text: str) -> tuple[ast.AST, ...]:
    """Every node of :func:`syntax_tree` of ``text``, in ``ast.walk``'s order, listed once."""
    return tuple(ast.walk(syntax_tree(text)))


def load_data_module(name: str) -> ModuleType:
    """``tests/data/<name>.py`` as the module ``name``, loaded once."""
    return load_script(f"tests/data/{name}.py")


def refused(result, code=2) -> str:
    """A CliRunner result that exited ``code`` with exactly one stderr line starting `error: ` and
    no traceback anywhere; returns the line."""
    assert result.exit_code == code, (
        result.exit_code,
        result.stdout[-2000:],
        result.stderr[-2000:],
    )
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return lines[0]


def stand_in_recorder(spool: Path):
    """A ``bcgprof record`` recorder appending to ``spool`` with stand-in readings (every figure 0,
    no process line, no NVML), and a function that captures one graph through a graph class of its
    own (torch.cuda.CUDAGraph's capture API, nothing captured), patched by this recorder: the patch
    is per class, so each caller's captures reach its own recorder."""
    from bcgprof.record.hook import Recorder

    class Graph:
        def capture_begin(self, pool=None, capture_error_mode="global"):
            pass

        def capture_end(self):
            pass

        def instantiate(self):
            pass

        def pool(self):
            return (1, 1)

    rec = Recorder(str(spool), [], sample_ms=0)
    rec.read = lambda: {"allocated": 0, "reserved": 0, "used": 0, "process": None, "free": 0,
                        "pools": {}, "time": 0.0}  # fmt: skip
    rec._described = True  # no process line: it would read torch's version and the device
    rec._start_nvml = lambda: None  # type: ignore[method-assign]
    rec.patch_graphs(Graph)

    def capture() -> None:
        g = Graph()
        g.capture_begin()
        g.capture_end()

    return rec, capture
