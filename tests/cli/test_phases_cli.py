"""`capture --phase prefill,decode` from the command line (the runs it makes, its refusals), and a
report of several phases in one pool read by `show` (the pair against each phase alone) and refused
by the commands that read one-phase reports, each in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bcgprof.cli import app
from tests.helpers import refused
from tests.phased_report import MIB, alone_total, pair_total, write_phased_report

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def captured(monkeypatch):
    """run_capture replaced: the list receives the CaptureOptions of every capture made."""
    import bcgprof.measure.runner

    calls: list = []

    def fake_run_capture(opts, on_event=None, **_):
        from bcgprof.measure.runner import CaptureOutcome

        calls.append(opts)
        return CaptureOutcome(out=None, status="complete", exit_code=0, reporter=False)

    monkeypatch.setattr(bcgprof.measure.runner, "run_capture", fake_run_capture)
    return calls


def test_two_phases_capture_each_alone_then_the_pair_into_one_pool(captured, tmp_path):
    out = tmp_path / "pair"
    result = run(
        "capture", "--phase", "prefill,decode", "--buckets", "prefill=16,8;decode=8,2", "--out", out
    )
    assert result.exit_code == 0, result.stderr
    alone_prefill, alone_decode, pair = captured
    assert (pair.phases, pair.phase, pair.out) == (["prefill", "decode"], "prefill", out)
    assert pair.phase_buckets == {"prefill": "16,8", "decode": "8,2"} and pair.buckets is None
    assert (alone_prefill.phase, alone_prefill.phases, alone_prefill.buckets) == (
        "prefill",
        [],
        "16,8",
    )
    assert (alone_decode.phase, alone_decode.buckets, alone_decode.out) == (
        "decode",
        "8,2",
        out / "phase-decode",
    )


def test_a_phase_without_buckets_keeps_its_preset(captured, tmp_path):
    result = run("capture", "--phase", "decode,prefill", "--buckets", "decode=4", "--out", tmp_path)
    assert result.exit_code == 0, result.stderr
    pair = captured[-1]
    assert pair.phases == ["decode", "prefill"] and pair.phase_buckets == {"decode": "4"}
    assert captured[1].phase == "prefill" and captured[1].buckets is None  # its preset


@pytest.mark.parametrize(
    "args, expected",
    [
        (("--phase", "prefill,train"), "'train' is not a phase"),
        (("--phase", "prefill,prefill"), "names a phase twice"),
        (("--phase", "prefill,decode", "--buckets", "16,8"), "each entry is PHASE=SPEC"),
        (("--phase", "prefill,decode", "--buckets", "decode=0"), "the decode entry"),
        (("--phase", "prefill,decode", "--num-layers", "1,2"), "one layer count at a time"),
        (("--phase", "prefill,decode", "--tp", "2"), "use --tp 1"),
    ],
)
def test_bad_phase_lists_are_refused_in_one_line(captured, args, expected):
    line = refused(run("capture", "--model", "Llama-3.1-8B", *args))
    assert expected in line
    assert captured == []


def test_show_sets_the_pair_against_each_phase_alone(tmp_path):
    path = write_phased_report(tmp_path / "pair")
    result = run("show", path, "-f", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    pools = {p["mode"]: p for p in data["phases_in_one_pool"]}
    per_bucket = pools["per-bucket"]
    assert per_bucket["kind"] == "measured"
    assert per_bucket["pair_bytes"] == pair_total("per-bucket")
    larger = max(alone_total("per-bucket", p) for p in ("prefill", "decode"))
    assert per_bucket["beyond_larger_bytes"] == pair_total("per-bucket") - larger
    assert per_bucket["pool_after_phase_bytes"]["prefill"] == 110 * MIB
    assert {b["phase"] for b in data["buckets"]} == {"prefill", "decode"}
    table = run("show", path)
    assert table.exit_code == 0, table.stderr
    assert "phases in one pool (measured" in table.stdout
    assert "per-bucket decode, in one pool" in table.stdout
    assert "prefill then decode in one pool: prefill 2 buckets 4..8" in table.stdout


def test_show_without_the_phases_alone_gives_no_comparison(tmp_path):
    path = write_phased_report(tmp_path / "pair", alone=False)
    data = json.loads(run("show", path, "-f", "json").stdout)
    assert all(p["beyond_larger_bytes"] is None for p in data["phases_in_one_pool"])
    assert "no finished capture of prefill, decode alone" in run("show", path).stdout


def test_a_one_phase_report_shows_no_phase_anywhere(data_dir):
    data = json.loads(run("show", data_dir / "baseline", "-f", "json").stdout)
    assert "phases" not in data["run"] and "phases_in_one_pool" not in data
    assert all("phase" not in b for b in data["buckets"])


@pytest.mark.parametrize(
    "command",
    [
        lambda p, o: ("compare", p, o),
        lambda p, o: ("gate", "--baseline", o, "--current", p),
        lambda p, o: ("plot", p, "--out", Path(o).parent / "x.png"),
        lambda p, o: ("explain", p),
        lambda p, o: ("predict", "--from", p, "--buckets", "4"),
        lambda p, o: ("advise", "--from", p, "--budget", "1GiB"),
        lambda p, o: ("audit", p),
    ],
)
def test_readers_of_one_phase_reports_refuse_a_pair_in_one_line(tmp_path, data_dir, command):
    path = write_phased_report(tmp_path / "pair")
    other = tmp_path / "other"
    shutil.copytree(data_dir / "baseline", other)
    line = refused(run(*command(path, other)))
    assert "captured into one pool" in line and "bcgprof show" in line


def test_predict_after_gives_the_pair_predicted_from_each_phase_s_traces(tmp_path):
    from tests.unit.test_pair_predict import (
        DECODE,
        DECODE_STREAM,
        PREFILL,
        _profile,
        decode_forward,
        forward,
    )

    _profile(tmp_path / "prefill", "prefill", PREFILL, forward)
    _profile(tmp_path / "decode", "decode", DECODE, decode_forward, DECODE_STREAM)
    args = ("predict", "--from", tmp_path / "decode", "--after", tmp_path / "prefill")
    result = run(*args, "-f", "json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["label"] == "predicted, not measured" and data["phases"] == ["prefill", "decode"]
    assert {m["mode"] for m in data["modes"]} == {"per-bucket", "shared"}
    assert all(m["kind"] == "predicted" for m in data["modes"])
    table = run(*args)
    assert "pair (predicted)" in table.stdout and "predicted, not measured" in table.stdout
    assert "--after predicts" in refused(run(*args, "--buckets", "64"))
    pair = write_phased_report(tmp_path / "pair")
    assert "captured into one pool" in refused(
        run("predict", "--from", tmp_path / "decode", "--after", pair)
    )
