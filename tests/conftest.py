"""Shared fixtures for the CPU tests: the hand-made reports under tests/data/ and a way to make
variants, and the committed reports' traced profiles, prepared once per session
(tests/committed.py)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from children import Prestarted
from committed import CommittedProfiles
from helpers import DATA, load_data_module
from hopper import HopperCompiles

# The fused kernels' CPU tests (tests/models/test_kernels.py) run Triton's interpreter, which has
# to be chosen before triton is first imported; with a GPU the compiled kernels are tested.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # One thread for torch's CPU operators: the tests' tensors are small, and an operator split over
    # every CPU waits for its slowest part, so on a machine whose CPUs are also busy with something
    # else (a test's child process, tests/hopper.py's compiles) it runs many times slower than one
    # thread would. The gloo ranks of the tensor-parallel tests set the same for themselves.
    torch.set_num_threads(1)

maker = load_data_module("make_reports")
hopper_compiles = HopperCompiles()


def pytest_collection_modifyitems(session, config, items):
    """The tests that read the kernels compiled for sm_90 (tests/hopper.py) run last, in their
    order: the compiles, run ahead among the children (tests/children.py) once the children of
    the tests before them have run, then have the rest of the session to finish instead of
    keeping a test waiting."""
    items[:] = [i for i in items if "hopper_compile" not in i.fixturenames] + [
        i for i in items if "hopper_compile" in i.fixturenames
    ]


def pytest_sessionfinish(session):
    hopper_compiles.stop()


@pytest.fixture
def hopper_compile(request):
    """hopper_compile() -> (what this module's HOPPER_SCRIPT printed, its failure or ''), compiled
    in the session's child (tests/hopper.py)."""
    return lambda: hopper_compiles.outcome(request.module)


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def report_copy(tmp_path):
    """Copy a report from tests/data/ into tmp_path (so a test may alter it) and return its path."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(DATA / name, dest)
        return dest

    return copy


@pytest.fixture
def write_report(tmp_path):
    """write_report(name, rows=None, **run_changes) -> path of a fresh report built like
    tests/data/baseline."""
    from bcgprof.report import ReportWriter

    def write(name: str, rows=None, **run_changes) -> Path:
        rows = maker.all_rows() if rows is None else rows
        run = maker.run_info(**run_changes)
        if "buckets" not in run_changes:
            run = dataclasses.replace(run, buckets=sorted({r.bucket for r in rows}))
        path = tmp_path / name
        ReportWriter(path, run, rows)
        return path

    return write


class Rows(dict):
    """Baseline rows by mode and bucket: rows['per-bucket'][4096] is a mutable BucketRecord."""

    def all(self) -> list:
        return [r for mode in self.values() for r in mode.values()]


@pytest.fixture
def rows():
    """rows(**mode_rows_kwargs) -> fresh :class:`Rows` shaped like tests/data/baseline."""

    def build(**kwargs) -> Rows:
        return Rows(
            {
                mode: {r.bucket: r for r in maker.mode_rows(mode, **kwargs)}
                for mode in ("per-bucket", "shared", "floor")
            }
        )

    return build


@pytest.fixture(scope="session", autouse=True)
def trace_cache_of_the_session(tmp_path_factory, request):
    """What commands keep of trace files between runs (bcgprof.analysis.predict.trace_cache) goes to
    a directory of this session, shared by its tests, the commands they start and the session's
    other workers (pytest-xdist), never the user's own cache: a run starts cold, as CI's does, and
    leaves the
    user's cache alone."""
    base = tmp_path_factory.getbasetemp()
    # a pytest-xdist worker: its folder is one of the session's
    worker = hasattr(request.config, "workerinput")
    root = (base.parent if worker else base) / "xdg-cache"
    root.mkdir(exist_ok=True)
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(root))
    patch.delenv("BCGPROF_CACHE_DIR", raising=False)  # the user's choice of cache, or none
    patch.delenv("BCGPROF_NO_CACHE", raising=False)
    # a worker gets COLUMNS=80, which a plain run does not set: the CLI's pipe width would follow it
    if worker:
        patch.delenv("COLUMNS", raising=False)
    yield
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def interpreter_without_dead_overflow_checks():
    """Triton's interpreter builds an integer-overflow check around every integer add, sub and
    mul of a kernel (``sanitize_overflow``) and hands it to ``device_assert``, which drops it
    unless the options ask for ``debug``; a compiled kernel drops the same check as dead code.
    Built in Python for every element block of every program instance, the discarded checks are
    a large share of an interpreted kernel's time. The session turns them off while ``debug`` is
    off, so no check that could fire is lost; a Triton whose interpreter lacks these options is
    left as it is."""
    interpreter = sys.modules.get("triton.runtime.interpreter")  # imported by collected tests
    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if (
        not dataclasses.is_dataclass(options)
        or getattr(options, "debug", True)
        or not getattr(options, "sanitize_overflow", False)
    ):
        yield
        return
    builder.options = dataclasses.replace(options, sanitize_overflow=False)
    yield
    builder.options = options


@pytest.fixture(scope="session", autouse=True)
def one_command_tree_per_app():
    """Typer's CliRunner builds the app's whole click command tree (each command's parameters
    from its signature and type hints) on every invoke, most of the time an in-process command
    takes. The tree depends on the app alone and running a command leaves it as it was (as the
    CLI's own process builds it once and runs it), so the session builds it once per app."""
    import typer.testing

    build = getattr(typer.testing, "_get_command", None)
    if build is None:  # another Typer: each invoke builds the tree, as before
        yield
        return
    built: dict[int, tuple[object, object]] = {}

    def command_of(app):
        if id(app) not in built:
            built[id(app)] = (app, build(app))  # the app kept, so its id is never reused
        return built[id(app)][1]

    patch = pytest.MonkeyPatch()
    patch.setattr(typer.testing, "_get_command", command_of)
    yield
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def children_ahead_of_their_tests(request, tmp_path_factory, trace_cache_of_the_session):
    """The children the selected tests read through ``prestarted`` (tests/children.py), and the
    kernels compiled for sm_90 (tests/hopper.py: one child for every selected module's script, in
    the place of the first test that asks), run from the first test on, one at a time in the
    tests' order; a worker of pytest-xdist starts none ahead."""
    children = Prestarted(lambda key: tmp_path_factory.mktemp(key))
    if not hasattr(request.config, "workerinput"):
        items = request.session.items
        compiled = list(
            dict.fromkeys(i.module for i in items if "hopper_compile" in i.fixturenames)
        )
        jobs, queued = [], set()
        for item in items:
            if "hopper_compile" in item.fixturenames and "hopper" not in queued:
                queued.add("hopper")
                jobs.append(lambda: hopper_compiles.run(compiled))
            if "prestarted" in item.fixturenames:
                for name in _prestart_names(item):
                    key = _child_key(item.module, name)
                    if key not in queued:
                        queued.add(key)
                        jobs.append(children.child(key, item.module.CHILDREN[name]))
        children.start(jobs)
    yield children
    children.stop()
    hopper_compiles.stop()
    children.join()


def _prestart_names(item) -> list[str]:
    return [name for mark in item.iter_markers("prestart") for name in mark.args]


def _child_key(module, name: str) -> str:
    return f"{module.__name__}.{name}"


@pytest.fixture
def prestarted(request, children_ahead_of_their_tests):
    """prestarted(name) -> (the completed process, its folder) of the module's child ``name``
    (its ``CHILDREN``), which the test's ``prestart`` mark names."""
    names = _prestart_names(request.node)

    def outcome(name: str):
        assert name in names, f"{name!r} is not in the test's prestart mark {names}"
        return children_ahead_of_their_tests.outcome(
            _child_key(request.module, name), request.module.CHILDREN[name]
        )

    return outcome


@pytest.fixture(scope="session")
def committed_profiles() -> CommittedProfiles:
    """committed_profiles("reports/NAME") -> (report, prepared profile), each prepared and
    checked once."""
    return CommittedProfiles()


@pytest.fixture
def shared_profiles(committed_profiles, monkeypatch) -> CommittedProfiles:
    """The package's own predictions from a committed report (predict, advise, the CLI) use the
    session's prepared profile of it instead of preparing and checking it again."""
    committed_profiles.patch(monkeypatch)
    return committed_profiles
