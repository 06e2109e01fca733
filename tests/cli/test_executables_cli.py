"""`capture --executables`: from the command line to the options a mode's process gets, into
run.json and back out of a report; the per-bucket columns; what is refused, and how (no GPU)."""

import csv
import json
import shutil

import pytest
from typer.testing import CliRunner

from bcgprof.cli import app
from bcgprof.errors import CaptureError, ReportError
from bcgprof.options import CaptureOptions

from helpers import DATA, refused

runner = CliRunner()


@pytest.fixture
def captured(monkeypatch):
    """Replace run_capture; the list receives the CaptureOptions it was called with."""
    import bcgprof.measure.runner

    calls = []

    def fake_run_capture(opts, on_event=None, **_):
        from bcgprof.measure.runner import CaptureOutcome

        calls.append(opts)
        return CaptureOutcome(out=None, status="complete", exit_code=0, reporter=False)

    monkeypatch.setattr(bcgprof.measure.runner, "run_capture", fake_run_capture)
    return calls


@pytest.fixture
def bindings(monkeypatch):
    """Make the CUDA Python bindings look installed (or not) to the CLI's check."""
    import importlib.util

    real = importlib.util.find_spec

    def set_present(present: bool):
        def find_spec(name, *args, **kwargs):
            if name == "cuda.bindings":
                return object() if present else None
            return real(name, *args, **kwargs)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)

    return set_present


def test_executables_are_per_segment_unless_asked(captured):
    assert runner.invoke(app, ["capture"]).exit_code == 0
    assert captured[0].executables == "per-segment" == CaptureOptions().executables


def test_per_signature_reaches_the_mode_process(captured, bindings):
    bindings(True)
    result = runner.invoke(app, ["capture", "--executables", "per-signature"])
    assert result.exit_code == 0, result.stderr
    (opts,) = captured
    assert opts.executables == "per-signature"
    # as a mode's process gets it
    assert CaptureOptions.from_json(opts.to_json()).executables == "per-signature"


def test_per_signature_without_the_bindings_is_refused_before_any_work(captured, bindings):
    bindings(False)
    line = refused(runner.invoke(app, ["capture", "--executables", "per-signature"]))
    assert "cuda.bindings" in line and "--executables per-segment" in line
    assert captured == []


def test_an_unknown_choice_is_refused(captured):
    result = runner.invoke(app, ["capture", "--executables", "shared"])
    assert result.exit_code == 2 and "--executables" in result.stderr
    assert captured == []


def test_the_capture_loop_refuses_an_unknown_choice_and_missing_bindings(monkeypatch):
    from bcgprof.bcg import driver
    from bcgprof.measure import capturer

    with pytest.raises(CaptureError, match="unknown executables choice"):
        capturer.Capturer(lambda x: x, [], [1], CaptureOptions(executables="deduped"))
    assert capturer._shared_executables("per-segment") is None
    monkeypatch.setattr(driver, "cu", None)
    with pytest.raises(CaptureError, match="per-segment"):
        capturer._shared_executables("per-signature")


def test_capture_buckets_takes_executables_as_a_loop_option():
    from bcgprof.options import LOOP_OPTIONS

    assert "executables" in LOOP_OPTIONS


# ---------------------------------------------------------------- run.json and buckets.csv


def _copy_report(tmp_path):
    report = tmp_path / "report"
    shutil.copytree(DATA / "baseline", report)
    return report


def test_a_report_written_before_the_option_reads_as_per_segment_with_empty_columns(tmp_path):
    from bcgprof.report import read_report

    report = read_report(_copy_report(tmp_path))
    assert report.run.executables == "per-segment"
    assert all(r.executables is None and r.signatures is None for r in report.buckets)


def test_run_json_and_the_columns_read_back(tmp_path):
    from bcgprof.report import read_report

    path = _copy_report(tmp_path)
    run = json.loads((path / "run.json").read_text())
    run["executables"] = "per-signature"
    (path / "run.json").write_text(json.dumps(run))
    with (path / "buckets.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    for i, row in enumerate(rows):
        row["executables"], row["signatures"] = str(2 + i), "3"
    with (path / "buckets.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    report = read_report(path)
    assert report.run.executables == "per-signature"
    assert [r.executables for r in report.buckets] == [2 + i for i in range(len(rows))]
    assert {r.signatures for r in report.buckets} == {3}


def test_run_json_refuses_an_unknown_executables_word(tmp_path):
    from bcgprof.report import read_report

    path = _copy_report(tmp_path)
    run = json.loads((path / "run.json").read_text())
    run["executables"] = "shared"
    (path / "run.json").write_text(json.dumps(run))
    with pytest.raises(ReportError, match="executables must be one of per-segment, per-signature"):
        read_report(path)


def test_compare_names_a_difference_in_executables():
    from bcgprof.analysis.compare import run_differences
    from bcgprof.report import RunInfo

    diffs = run_differences(RunInfo(model="m"), RunInfo(model="m", executables="per-signature"))
    assert diffs == ["graph executables differ: per-segment vs per-signature"]
