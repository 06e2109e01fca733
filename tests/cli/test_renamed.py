"""Renamed words: each old spelling still works for one release, as its new one, with one warning
line on stderr; nothing writes an old word, and a report that holds one still reads."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from bcgprof.cli import app
from bcgprof.cli.params import respell
from bcgprof.errors import ReportError
from bcgprof.report import read_report

from helpers import ROOT

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def warned(result, old: str, new: str) -> None:
    """Exactly one stderr line says that ``old`` is deprecated and names ``new``."""
    lines = [ln for ln in result.stderr.splitlines() if "deprecated" in ln]
    assert lines == [
        f"warning: {old} is deprecated and will be removed in the next release; use {new}"
    ], result.stderr


@pytest.fixture
def captured(monkeypatch):
    """Replace run_capture; the list receives the CaptureOptions it was called with."""
    import bcgprof.measure.runner
    from bcgprof.measure.runner import CaptureOutcome

    calls: list = []

    def fake_run_capture(opts, on_event=None, **_):
        calls.append(opts)
        return CaptureOutcome(out=None, status="complete", exit_code=0, reporter=False)

    monkeypatch.setattr(bcgprof.measure.runner, "run_capture", fake_run_capture)
    return calls


def test_respelling_rewrites_old_names_and_choices_only_where_they_are_options():
    options, choices = {"--per-bucket": "--each-bucket"}, {"--weights": {"shared": "one-layer"}}
    assert respell(
        ["--weights", "shared", "--modes", "shared", "--per-bucket"], options, choices
    ) == ["--weights", "one-layer", "--modes", "shared", "--each-bucket"]
    assert respell(["--weights=shared", "--per-bucket=x"], options, choices) == [
        "--weights=one-layer",
        "--each-bucket=x",
    ]
    assert respell(["shared", "--weights"], options, choices) == [
        "shared",
        "--weights",
    ]  # no value to rewrite
    assert respell(["--", "--per-bucket", "--weights", "shared"], options, choices) == [
        "--",
        "--per-bucket",
        "--weights",
        "shared",
    ]  # after --, arguments are not options


def test_weights_shared_is_one_layer_with_a_warning(captured):
    new = run("capture", "--weights", "one-layer")
    old = run("capture", "--weights", "shared", "--modes", "shared,floor")
    assert new.exit_code == old.exit_code == 0, old.stderr
    assert [o.weights for o in captured] == ["one-layer", "one-layer"]
    assert captured[1].modes == ["shared", "floor"]  # the mode of the same name is not touched
    warned(old, "--weights shared", "--weights one-layer")
    assert "deprecated" not in new.stderr
    assert "shared:" not in run("capture", "--help").stdout  # the old word is not offered


def test_a_report_that_says_shared_weights_reads_as_one_layer_weights(tmp_path, data_dir):
    path = tmp_path / "old"
    shutil.copytree(data_dir / "baseline", path)
    data = json.loads((path / "run.json").read_text())
    data["weights"] = "shared"
    (path / "run.json").write_text(json.dumps(data))
    assert read_report(path).run.weights == "one-layer"
    data["weights"] = "tied"
    (path / "run.json").write_text(json.dumps(data))
    with pytest.raises(
        ReportError, match="field weights must be one of dummy, one-layer, safetensors"
    ):
        read_report(path)


def test_gate_per_bucket_is_each_bucket_with_a_warning(data_dir):
    args = [
        "gate",
        "--baseline",
        data_dir / "baseline",
        "--current",
        data_dir / "grown",
        "-f",
        "json",
    ]
    new, old = run(*args, "--each-bucket"), run(*args, "--per-bucket")
    assert new.exit_code == old.exit_code == 1  # the grown report regresses
    assert json.loads(old.stdout) == json.loads(new.stdout)
    tolerance = json.loads(new.stdout)["tolerance"]
    # the old key, for one release
    assert tolerance["each_bucket"] is True and tolerance["per_bucket"] is True
    warned(old, "--per-bucket", "--each-bucket")
    assert "deprecated" not in new.stderr
    assert "--per-bucket" not in run("gate", "--help").stdout


def test_predict_layers_is_num_layers_as_capture_spells_it_with_a_warning():
    args = ["predict", "--from", ROOT / "reports" / "gpt-oss-20b-h200-layers", "-f", "json"]
    new, old = run(*args, "--num-layers", "12"), run(*args, "--layers", "12")
    assert new.exit_code == old.exit_code == 0, old.stderr
    assert json.loads(new.stdout)["layers"] == 12 and new.stdout == old.stdout
    warned(old, "--layers", "--num-layers")
    assert "deprecated" not in new.stderr
    helps = run("predict", "--help").stdout, run("capture", "--help").stdout
    assert all("--num-layers" in h for h in helps) and "--layers" not in helps[0]


@pytest.mark.parametrize(
    "option, field", [("--warmup-repeat", "warmup_repeat"), ("--break-repeat", "break_repeat")]
)
def test_repeats_made_of_allocator_requests_are_requests_not_replayed(captured, option, field):
    old, new = run("capture", option, "replayed"), run("capture", f"{option}=requests")
    assert old.exit_code == new.exit_code == 0, old.stderr
    assert [getattr(o, field) for o in captured] == ["requests", "requests"]
    warned(old, f"{option} replayed", f"{option} requests")
    assert "deprecated" not in new.stderr
    assert "replayed" not in run("capture", "--help").stdout


def test_capture_options_take_an_old_word_as_its_new_one_with_a_warning():
    from bcgprof.options import CaptureOptions

    with pytest.warns(FutureWarning, match="warmup_repeat='replayed' is deprecated.*'requests'"):
        opts = CaptureOptions(warmup_repeat="replayed")
    assert opts.warmup_repeat == "requests" and CaptureOptions.from_json(opts.to_json()) == opts


def test_bcgprof_read_report_is_read_frames_under_its_old_name_with_a_warning(data_dir):
    import bcgprof
    from bcgprof.report import read_report_tables

    frames = bcgprof.read_frames(data_dir / "baseline")
    with pytest.warns(
        FutureWarning, match="bcgprof.read_report is deprecated.*bcgprof.read_frames"
    ):
        old = bcgprof.read_report(data_dir / "baseline")
    with pytest.warns(FutureWarning, match="read_report_tables is deprecated.*bcgprof.read_frames"):
        older = read_report_tables(data_dir / "baseline")
    for tables in (old, older):
        assert tables.run == frames.run and tables.buckets.equals(frames.buckets)
    # the one read_report: a Report of records
    assert read_report(data_dir / "baseline").run == frames.run
