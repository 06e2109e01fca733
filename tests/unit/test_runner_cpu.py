"""The capture runner's process protocol and final status, on a machine without a GPU."""

import json
import os
import sys
from pathlib import Path

import pytest

from bcgprof.errors import EXIT_FAILED, EXIT_INTERRUPTED
from bcgprof.measure.launch import ModeLauncher
from bcgprof.measure.runner import _finish
from bcgprof.options import CaptureOptions
from bcgprof.report import ReportWriter, RunInfo, read_report
from bcgprof.vocab import Mode, RunStatus

from children import Command
from helpers import load_data_module

maker = load_data_module("make_reports")


def _started(write_report, rows=(), **changes):
    """A report as the runner leaves it for its modes: a whole run.json, still running."""
    buckets = {"buckets": [4, 8]} if not rows else {}
    return write_report(
        "report", rows=list(rows), status=RunStatus.RUNNING, ended_at="", **buckets, **changes
    )


# Loaded by the mode process at start-up (through PYTHONPATH): its model lookup crashes, the way
# an error no check foresaw would, on any machine and before anything touches a GPU.
CRASH = """
import importlib

def crash(*args, **kwargs):
    raise RuntimeError("the model lookup crashed\\nits second line")

for name in ("bcgprof.spec.config", "bcgprof.spec"):  # wherever it is imported from
    module = importlib.import_module(name)
    if hasattr(module, "resolve_model"):
        module.resolve_model = crash
"""


def test_a_mode_process_that_fails_reports_one_error_event_and_keeps_its_log(
    tmp_path, monkeypatch, write_report
):
    """The failure is the mode's own, injected: sent to cuda:0 instead, a CPU machine fails inside
    torch (an AttributeError or a RuntimeError, by torch build) and a GPU machine not at all."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(CRASH)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(inject), os.environ.get("PYTHONPATH")]))
    )
    out = _started(write_report, modes=[Mode.SHARED])
    events = []
    # a CPU group: no torch.cuda call first
    opts = CaptureOptions(buckets="4,8", modes=["shared"], device="cpu")
    code = ModeLauncher(opts, out).run_one("shared", events.append)
    assert code == EXIT_FAILED
    errors = [e for e in events if e.get("event") == "error"]
    assert [e["message"] for e in errors] == [
        "RuntimeError: the model lookup crashed"
    ]  # one event, one line
    log = (out / "shared.log").read_text()  # the traceback went to the log, not the screen
    assert "Traceback" in log and "in crash" in log and "its second line" in log


def _mode_process_without_go(folder: Path) -> Command:
    """A mode process started on a report as the runner leaves it, its stdin closed at once: no
    go ever comes. ``write_report``'s report, made here for the child run ahead."""
    out = folder / "report"
    run = maker.run_info(status=RunStatus.RUNNING, ended_at="", buckets=[4, 8], modes=[Mode.SHARED])
    ReportWriter(out, run, [])
    opts = CaptureOptions(buckets="4,8", modes=["shared"])
    argv = [sys.executable, "-m", "bcgprof.measure.mode", str(out), "shared", opts.to_json()]
    return Command(argv, input="")


@pytest.mark.prestart("no-go")
def test_a_mode_process_waits_for_go_and_leaves_quietly_without_it(prestarted):
    proc, folder = prestarted("no-go")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert read_report(folder / "report").buckets == []  # it did nothing


def test_the_next_mode_starts_only_after_the_previous_one_exited(tmp_path, monkeypatch):
    """Every mode runs; a pre-started process is released only once the one before it is gone."""
    import bcgprof.measure.launch as launch

    out = tmp_path / "report"
    ReportWriter(out, RunInfo(model="gpt-oss-20b"))
    started, order = [], []

    class FakeProcesses:
        def __init__(self, opts, mode, out):
            started.append(mode)
            self.mode = mode

        def go(self):
            order.append(("go", self.mode))

        def relay(self, on_event, grace_s):
            on_event({"event": "done", "mode": self.mode})
            order.append(("exited", self.mode))
            return 0

        def cancel(self):
            order.append(("cancel", self.mode))

    monkeypatch.setattr(launch, "ModeProcesses", FakeProcesses)
    launcher = ModeLauncher(CaptureOptions(modes=["per-bucket", "shared", "floor"]), out)
    events = []
    codes, interrupted = launcher.run_all(events.append)
    launcher.close()
    assert codes == {"per-bucket": 0, "shared": 0, "floor": 0} and not interrupted
    assert started == ["per-bucket", "shared", "floor"]
    assert order == [
        ("go", "per-bucket"),
        ("exited", "per-bucket"),
        ("go", "shared"),
        ("exited", "shared"),
        ("go", "floor"),
        ("exited", "floor"),
    ]
    assert [e["mode"] for e in events] == ["per-bucket", "shared", "floor"]


def test_options_travel_to_a_mode_process_as_json():
    opts = CaptureOptions(model="Qwen3-8B", modes=["floor"], num_layers=3, out=None, seed=5)
    back = CaptureOptions.from_json(opts.to_json())
    assert back == opts
    assert json.loads(opts.to_json())["modes"] == ["floor"]


def test_a_library_caller_s_unknown_address_layout_is_refused_before_any_work(tmp_path):
    import pytest

    from bcgprof.errors import CaptureError
    from bcgprof.measure import runner

    with pytest.raises(
        CaptureError, match="unknown address layout 'fxed'; use one of fixed, random"
    ):
        runner.run_capture(CaptureOptions(buckets="4,8", address_layout="fxed", out=tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_finish_marks_a_run_with_a_failed_mode_partial(write_report, rows):
    out = _started(
        write_report, [rows()[Mode.PER_BUCKET][4096]], modes=[Mode.PER_BUCKET, Mode.SHARED]
    )
    opts = CaptureOptions(modes=["per-bucket", "shared"])
    outcome = _finish(out, opts, {"per-bucket": 3, "shared": 0}, False)
    report = read_report(out)
    assert outcome.exit_code == 1 and outcome.status == "partial"
    assert report.run.status == "partial" and "per-bucket: exit 3" in report.run.message
    assert report.run.ended_at


def test_finish_marks_an_interrupted_run(write_report):
    out = _started(write_report, modes=[Mode.PER_BUCKET])
    outcome = _finish(out, CaptureOptions(modes=["per-bucket"]), {}, True)
    assert outcome.exit_code == EXIT_INTERRUPTED and read_report(out).run.status == "interrupted"


def test_the_first_mode_is_started_before_the_gpu_check_and_cancelled_when_it_fails(
    tmp_path, monkeypatch
):
    """With a driver present the first mode's process is started early; a failed GPU check stops it
    and leaves no directory behind."""
    import pytest

    import bcgprof.measure.launch as launch
    import bcgprof.measure.runner as runner
    from bcgprof.errors import NoGPUError

    started, cancelled = [], []

    class FakeProcesses:
        def __init__(self, opts, mode, out):
            assert out.is_dir()  # its log lives there
            started.append((mode, opts.out))

        def cancel(self):
            cancelled.append(True)

    def no_gpu(device):
        raise NoGPUError("the GPU check failed (injected)")

    monkeypatch.setattr(launch, "ModeProcesses", FakeProcesses)
    monkeypatch.setattr(runner, "_driver_loaded", lambda: True)
    monkeypatch.setattr(runner, "check_gpu", no_gpu)
    out = tmp_path / "report"
    # this check's, no other
    with pytest.raises(NoGPUError, match=r"the GPU check failed \(injected\)"):
        runner.run_capture(CaptureOptions(buckets="4,8", modes=["shared", "floor"], out=str(out)))
    assert started == [("shared", str(out))] and cancelled == [True]
    assert not out.exists()


def _fake_capture_machine(monkeypatch, interrupt=None):
    """The runner on a fake GPU with fake mode processes: every process and its go, exit or cancel,
    in order. ``interrupt``: (layers, mode) whose process exits as interrupted."""
    import bcgprof.measure.launch as launch
    import bcgprof.measure.runner as runner

    log = []

    class FakeProcesses:
        def __init__(self, opts, mode, out):
            assert out.is_dir() and str(out) == opts.out  # its log lives in its own report
            self.opts, self.mode = opts, mode
            log.append(("start", opts.num_layers, mode))

        def go(self):
            log.append(("go", self.opts.num_layers, self.mode))

        def relay(self, on_event, grace_s):
            log.append(("exited", self.opts.num_layers, self.mode))
            return EXIT_INTERRUPTED if (self.opts.num_layers, self.mode) == interrupt else 0

        def cancel(self):
            log.append(("cancel", self.opts.num_layers, self.mode))

    def new_report(opts, spec, buckets, dev, extra=None):
        return ReportWriter(
            runner._report_dir(opts, spec),
            RunInfo(
                model=spec.name,
                config_hash=spec.config_hash,
                buckets=buckets,
                modes=list(opts.modes),
                layers=opts.num_layers,
                status=RunStatus.RUNNING,
                ended_at="",
            ),
        )

    monkeypatch.setattr(launch, "ModeProcesses", FakeProcesses)
    monkeypatch.setattr(runner, "_driver_loaded", lambda: True)
    monkeypatch.setattr(runner, "check_gpu", lambda device: device)
    monkeypatch.setattr(runner, "_new_report", new_report)
    return runner, log


def test_the_next_depth_starts_while_the_last_modes_of_this_one_work(tmp_path, monkeypatch):
    """--num-layers 2,4: each mode's process starts LOOKAHEAD (2) modes ahead of its turn, the
    4-layer capture's first mode once the 2-layer capture's last is among them; a mode is released
    only after the one before it exited, and the handed-on process has the options its own run gives
    its
    modes."""
    import dataclasses

    from bcgprof.measure.launch import LOOKAHEAD

    runner, log = _fake_capture_machine(monkeypatch)
    assert LOOKAHEAD == 2
    two = CaptureOptions(
        buckets="4,8",
        modes=["shared", "shared-largest", "floor"],
        num_layers=2,
        out=tmp_path / "layers-2",
    )
    four = dataclasses.replace(two, num_layers=4, out=tmp_path / "layers-4")
    first = runner.run_capture(two, then=four)
    assert first.exit_code == 0 and first.handoff is not None
    second = runner.run_capture(four, prestarted=first.handoff)
    assert second.exit_code == 0 and second.handoff is None
    assert log == [
        ("start", 2, "shared"),
        ("go", 2, "shared"),
        ("start", 2, "shared-largest"),
        ("start", 2, "floor"),
        ("exited", 2, "shared"),
        ("go", 2, "shared-largest"),
        ("start", 4, "shared"),
        ("exited", 2, "shared-largest"),
        ("go", 2, "floor"),
        ("exited", 2, "floor"),
        ("go", 4, "shared"),
        ("start", 4, "shared-largest"),
        ("start", 4, "floor"),
        ("exited", 4, "shared"),
        ("go", 4, "shared-largest"),
        ("exited", 4, "shared-largest"),
        ("go", 4, "floor"),
        ("exited", 4, "floor"),
    ]
    handed, own = (
        first.handoff.opts,
        runner._handoff_options(dataclasses.replace(four, out=tmp_path / "again")),
    )
    assert handed == dataclasses.replace(own, out=str(tmp_path / "layers-4"))
    assert json.loads((tmp_path / "layers-4" / "run.json").read_text())["status"] == "complete"


def test_an_interrupted_depth_cancels_the_next_one_it_started(tmp_path, monkeypatch):
    import dataclasses

    runner, log = _fake_capture_machine(monkeypatch, interrupt=(2, "floor"))
    two = CaptureOptions(
        buckets="4,8", modes=["shared", "floor"], num_layers=2, out=tmp_path / "layers-2"
    )
    outcome = runner.run_capture(
        two, then=dataclasses.replace(two, num_layers=4, out=tmp_path / "layers-4")
    )
    assert outcome.exit_code == EXIT_INTERRUPTED and outcome.handoff is None
    assert log[-2:] == [("exited", 2, "floor"), ("cancel", 4, "shared")]


def test_no_handoff_into_a_directory_that_holds_a_report(tmp_path, monkeypatch, write_report):
    """A next capture whose --out already holds a report gets no process (its log would land there);
    its own run refuses it."""
    import dataclasses

    runner, log = _fake_capture_machine(monkeypatch)
    taken = write_report("layers-4")
    two = CaptureOptions(buckets="4,8", modes=["floor"], num_layers=2, out=tmp_path / "layers-2")
    outcome = runner.run_capture(two, then=dataclasses.replace(two, num_layers=4, out=taken))
    assert outcome.handoff is None and all(entry[1] == 2 for entry in log)


def test_the_capturer_refuses_an_unknown_warm_up_output_before_it_needs_a_gpu():
    import pytest
    import torch

    from bcgprof.errors import CaptureError
    from bcgprof.measure.capture import Capturer
    from bcgprof.options import CaptureOptions

    with pytest.raises(CaptureError, match="unknown warm-up output 'kept'; use one of held, freed"):
        Capturer(lambda x: x, [torch.zeros(4)], [4], CaptureOptions(warmup_output="kept"))


def test_the_python_api_takes_the_capture_options_and_changes_only_loop_fields():
    """capture_buckets reads the same CaptureOptions as the CLI: a keyword changes one field of it
    (and reaches the capturer's checks, which come before any GPU work); a field the loop does not
    read is refused."""
    import pytest
    import torch

    from bcgprof.errors import CaptureError
    from bcgprof.measure.capture import capture_buckets
    from bcgprof.options import LOOP_OPTIONS, CaptureOptions

    with pytest.raises(CaptureError, match="unknown warm-up repeat 'twice'"):
        capture_buckets(lambda x: x, [torch.zeros(4)], [4], warmup_repeat="twice")
    with pytest.raises(CaptureError, match="unknown order 'sideways'"):
        capture_buckets(lambda x: x, [torch.zeros(4)], [4], CaptureOptions(order="sideways"))
    with pytest.raises(
        TypeError, match="unexpected keyword argument.*model.*" + ", ".join(LOOP_OPTIONS)
    ):
        capture_buckets(lambda x: x, [torch.zeros(4)], [4], model="Qwen3-8B")


def test_the_python_api_collects_garbage_cycles_before_its_first_capture(monkeypatch):
    """A cycle left to Python's collector (it could hold an earlier capture's CUDAGraph, whose
    destruction in the middle of a capture CUDA refuses) is gone before the capture loop exists."""
    import gc
    import weakref

    import pytest
    import torch

    import bcgprof.measure.capture as capture_module

    class Node:
        pass

    seen = []

    class Stop(Exception):
        pass

    def capturer(*args, **kwargs):
        seen.append(ref())
        raise Stop

    monkeypatch.setattr(capture_module, "Capturer", capturer)
    enabled = gc.isenabled()
    gc.disable()  # only capture_buckets' own collection may free the cycle
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a
        ref = weakref.ref(a)
        del a, b
        assert ref() is not None
        with pytest.raises(Stop):
            capture_module.capture_buckets(lambda x: x, [torch.zeros(4)], [4])
    finally:
        if enabled:
            gc.enable()
    assert seen == [None]


def test_a_next_depth_that_cannot_start_early_leaves_this_one_alone(tmp_path, monkeypatch):
    """The next capture's directory cannot be made (a file is in the way): this capture finishes,
    nothing is handed on, and the next capture's own run will say why."""
    import dataclasses

    runner, log = _fake_capture_machine(monkeypatch)
    (tmp_path / "blocked").write_text("a file")
    two = CaptureOptions(
        buckets="4,8", modes=["shared", "floor"], num_layers=2, out=tmp_path / "layers-2"
    )
    outcome = runner.run_capture(
        two, then=dataclasses.replace(two, num_layers=4, out=tmp_path / "blocked" / "layers-4")
    )
    assert outcome.exit_code == 0 and outcome.handoff is None
    assert [entry for entry in log if entry[1] == 4] == []


PRELOAD = """
import json, sys
import torch

touched = []
def refuse(*args, **kwargs):
    touched.append("cuda")
    raise RuntimeError("the preload touched CUDA")
torch.cuda._lazy_init = refuse
torch.cuda.init = refuse

from bcgprof.measure import mode
from bcgprof.options import CaptureOptions

before = set(sys.modules)
mode._preload(CaptureOptions.from_json(sys.argv[1]))
print(json.dumps({"new": sorted(set(sys.modules) - before), "touched": touched,
                  "initialized": torch.cuda.is_initialized()}))
"""


PRELOADED = CaptureOptions(model="gpt-oss-20b", buckets="4,8", device="cuda:0")
# the mode processes run ahead of their tests (tests/children.py)
CHILDREN = {
    "no-go": _mode_process_without_go,
    "preload": lambda folder: Command([sys.executable, "-c", PRELOAD, PRELOADED.to_json()]),
}


@pytest.mark.prestart("preload")
def test_a_waiting_mode_process_imports_what_its_mode_needs_without_touching_cuda(prestarted):
    """The preload runs while the previous mode is being measured: it must bring in the capture
    code and the model's family file, and must never create a CUDA context (a context made then
    would sit in the device figures of the mode still running)."""
    proc, _ = prestarted("preload")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["touched"] == [] and got["initialized"] is False
    for name in (
        "bcgprof.measure.capture",
        "bcgprof.measure.tracing",
        "bcgprof.models.gpt_oss",
        "bcgprof.report",
        "sympy",
    ):
        assert name in got["new"], name
