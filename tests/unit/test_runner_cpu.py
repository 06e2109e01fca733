"""The capture runner's process protocol and final status, on a machine without a GPU."""

import json
import os
import subprocess
import sys

from bcgprof.errors import EXIT_FAILED, EXIT_INTERRUPTED
from bcgprof.measure.runner import ModeLauncher, _finish
from bcgprof.options import CaptureOptions
from bcgprof.report import ReportWriter, RunInfo, read_report
from bcgprof.vocab import Mode, RunStatus


def _started(write_report, rows=(), **changes):
    """A report as the runner leaves it for its modes: a whole run.json, still running."""
    buckets = {"buckets": [4, 8]} if not rows else {}
    return write_report("report", rows=list(rows), status=RunStatus.RUNNING, ended_at="", **buckets, **changes)


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


def test_a_mode_process_that_fails_reports_one_error_event_and_keeps_its_log(tmp_path, monkeypatch, write_report):
    """The failure is the mode's own, injected: sent to cuda:0 instead, a CPU machine fails inside
    torch (an AttributeError or a RuntimeError, by torch build) and a GPU machine not at all."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(CRASH)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(inject), os.environ.get("PYTHONPATH")])))
    out = _started(write_report, modes=[Mode.SHARED])
    events = []
    opts = CaptureOptions(buckets="4,8", modes=["shared"], device="cpu")  # a CPU group: no torch.cuda call first
    code = ModeLauncher(opts, out).run_one("shared", events.append)
    assert code == EXIT_FAILED
    errors = [e for e in events if e.get("event") == "error"]
    assert [e["message"] for e in errors] == ["RuntimeError: the model lookup crashed"]  # one event, one line
    log = (out / "shared.log").read_text()  # the traceback went to the log, not the screen
    assert "Traceback" in log and "in crash" in log and "its second line" in log


def test_a_mode_process_waits_for_go_and_leaves_quietly_without_it(write_report):
    out = _started(write_report, modes=[Mode.SHARED])
    opts = CaptureOptions(buckets="4,8", modes=["shared"])
    proc = subprocess.run([sys.executable, "-m", "bcgprof.measure.mode", str(out), "shared", opts.to_json()],
                          input="", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert read_report(out).buckets == []  # it did nothing


def test_the_next_mode_starts_only_after_the_previous_one_exited(tmp_path, monkeypatch):
    """Every mode runs; a pre-started process is released only once the one before it is gone."""
    import bcgprof.measure.runner as runner

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

    monkeypatch.setattr(runner, "_ModeProcesses", FakeProcesses)
    launcher = ModeLauncher(CaptureOptions(modes=["per-bucket", "shared", "floor"]), out)
    events = []
    codes, interrupted = launcher.run_all(events.append)
    launcher.close()
    assert codes == {"per-bucket": 0, "shared": 0, "floor": 0} and not interrupted
    assert started == ["per-bucket", "shared", "floor"]
    assert order == [("go", "per-bucket"), ("exited", "per-bucket"), ("go", "shared"), ("exited", "shared"),
                     ("go", "floor"), ("exited", "floor")]
    assert [e["mode"] for e in events] == ["per-bucket", "shared", "floor"]


def test_options_travel_to_a_mode_process_as_json():
    opts = CaptureOptions(model="Qwen3-8B", modes=["floor"], num_layers=3, out=None, seed=5)
    back = CaptureOptions.from_json(opts.to_json())
    assert back == opts
    assert json.loads(opts.to_json())["modes"] == ["floor"]


def test_finish_marks_a_run_with_a_failed_mode_partial(write_report, rows):
    out = _started(write_report, [rows()[Mode.PER_BUCKET][4096]], modes=[Mode.PER_BUCKET, Mode.SHARED])
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


def test_the_first_mode_is_started_before_the_gpu_check_and_cancelled_when_it_fails(tmp_path, monkeypatch):
    """With a driver present the first mode's process is started early; a failed GPU check stops it and
    leaves no directory behind."""
    import pytest

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

    monkeypatch.setattr(runner, "_ModeProcesses", FakeProcesses)
    monkeypatch.setattr(runner, "_driver_loaded", lambda: True)
    monkeypatch.setattr(runner, "check_gpu", no_gpu)
    out = tmp_path / "report"
    with pytest.raises(NoGPUError, match=r"the GPU check failed \(injected\)"):  # this check's, no other
        runner.run_capture(CaptureOptions(buckets="4,8", modes=["shared", "floor"], out=str(out)))
    assert started == [("shared", str(out))] and cancelled == [True]
    assert not out.exists()
