"""Prediction bands on synthetic data (bcgprof/analysis/predict/bands.py,
bcgprof/analysis/predict/executables.py): a list prediction's band is stated with its evidence (or
the lack of it) and grows with the list, evidence counts only for its own configuration, a band too
wide is flagged, the executables come from the staircase, advise keeps the band's top within the
budget, and the shipped file round-trips and is refused when malformed. What the committed reports
give: tests/regression/test_bands.py."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from bcgprof.analysis.predict import bands
from bcgprof.analysis.predict.advise import advice_json, advise
from bcgprof.analysis.predict.bands import (
    QUANTUM,
    Calibration,
    CalibrationError,
    ListBands,
    ListEvidence,
    Residual,
    calibration_json,
    parse_calibration,
    run_key,
    shipped_calibration,
)
from bcgprof.analysis.predict.executables import later_executables
from bcgprof.analysis.predict.lists import predict_buckets
from bcgprof.analysis.predict.prediction import prediction_json
from bcgprof.cli import app
from bcgprof.report import BucketRecord, RunInfo

MIB = 1 << 20


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A traced profile of a configuration no committed report shares (tests/traced_profile.py)."""
    from traced_profile import write_profile

    return write_profile(tmp_path_factory.mktemp("bands") / "profile")


# ---------------------------------------------------------------- list bands


def test_a_profile_without_held_out_lists_says_so_and_claims_one_step_per_bucket(synthetic):
    pred = predict_buckets(synthetic, [512, 1024, 4096])
    for m in pred.modes:
        n = len(m.buckets)
        assert m.band_lists == 0 and m.band_max_abs_error_bytes is None
        assert "no held-out lists of synthetic" in m.band_source and "not evidence" in m.band_source
        assert (m.device_used_bytes - m.low_bytes, m.high_bytes - m.device_used_bytes) == (
            n * QUANTUM,
            n * QUANTUM,
        )


def _calibration(run: RunInfo, *residuals: Residual) -> Calibration:
    return Calibration(
        lists=(ListEvidence(run_key(run), run.model, run.gpu_name, "reports/elsewhere", residuals),)
    )


def test_a_longer_list_than_any_held_out_grows_the_band_in_proportion(synthetic):
    cal = _calibration(
        synthetic.run,
        Residual("a", "shared", 4, 100 * MIB, 100 * MIB + 3 * MIB),
        Residual("b", "shared", 2, 100 * MIB, 100 * MIB - MIB),
    )
    b = ListBands(synthetic.run, "shared", cal, profile="reports/mine")
    assert (b.band(3).below, b.band(3).above) == (3 * MIB + QUANTUM, 3 * MIB + QUANTUM)
    assert b.band(4).above == 3 * MIB + QUANTUM and b.band(8).above == 6 * MIB + QUANTUM
    assert "grown x2.00" in b.band(8).source and "grown" not in b.band(4).source
    assert "predicted from reports/elsewhere" in b.band(3).source
    assert ListBands(synthetic.run, "per-bucket", cal).band(3).lists == 0  # evidence is per mode


def test_evidence_counts_only_for_the_same_configuration(synthetic):
    cal = _calibration(synthetic.run, Residual("a", "shared", 4, 100 * MIB, 101 * MIB))
    assert ListBands(synthetic.run, "shared", cal).band(3).lists == 1
    for change in (
        {"driver": "999.0"},
        {"torch_version": "9.9"},
        {"gpu_name": "another GPU"},
        {"layers": 7},
        {"experts": "packed"},
        {"moe": "sglang-mxfp4"},
        {"executables": "per-signature"},
        {"extra": {**synthetic.run.extra, "warmup_output": "freed"}},
    ):
        other = ListBands(replace(synthetic.run, **change), "shared", cal).band(3)
        assert other.lists == 0, change
    # the source names the choice that left it without evidence
    mxfp4 = ListBands(replace(synthetic.run, moe="sglang-mxfp4"), "shared", cal).band(3)
    assert "MoE workspaces sglang-mxfp4" in mxfp4.source


def test_a_calibration_from_before_the_capture_choices_were_keyed_reads_them_as_defaults(
    synthetic,
):
    cal = _calibration(synthetic.run, Residual("a", "shared", 4, 100 * MIB, 101 * MIB))
    data = calibration_json(cal)
    for field in ("moe", "executables", "warmup_output"):
        del data["lists"][0]["key"][field]
    older = parse_calibration(data, "old.json")
    assert ListBands(synthetic.run, "shared", older).band(3).lists == 1
    moved = replace(synthetic.run, moe="sglang-mxfp4")
    assert ListBands(moved, "shared", older).band(3).lists == 0


def test_a_band_wider_than_two_percent_is_flagged_not_a_result(synthetic, monkeypatch):
    total = predict_buckets(synthetic, [1024, 4096], ["shared"]).mode("shared").device_used_bytes
    wide = _calibration(synthetic.run, Residual("a", "shared", 2, total, total + total // 20))
    monkeypatch.setattr(bands, "shipped_calibration", lambda: wide)
    pred = predict_buckets(synthetic, [1024, 4096], ["shared"])
    m = pred.mode("shared")
    assert m.band_too_wide and prediction_json(pred)["modes"][0]["band_too_wide"] is True
    assert any("not a result" in n for n in pred.notes)


# ---------------------------------------------------------------- the executables model


def _rows(costs, nodes, step=QUANTUM, first=6 * MIB):
    """One mode's rows whose executables cost ``costs`` each (bytes), read as NVML does: a running
    total rounded down to ``step``."""
    rows, true, read = (
        [
            BucketRecord(
                mode="shared",
                bucket=10_000,
                order=0,
                status="ok",
                graph_nodes=nodes[0],
                non_torch_delta_bytes=first,
            )
        ],
        0.0,
        0,
    )
    for i, (c, n) in enumerate(zip(costs, nodes[1:], strict=True), start=1):
        true += c
        now = int(true // step) * step
        rows.append(
            BucketRecord(
                mode="shared",
                bucket=10_000 - i,
                order=i,
                status="ok",
                graph_nodes=n,
                non_torch_delta_bytes=now - read,
            )
        )
        read = now
    return rows


def test_each_buckets_executables_come_from_the_staircase_not_its_rounded_row():
    nodes = [2400] + [2000 + 7 * (i % 70) for i in range(73)]
    # a fixed cost per bucket and one per kernel node
    costs = [4 * MIB + 1800 * n for n in nodes[1:]]
    rows = _rows(costs, nodes)
    got = later_executables(rows)
    # the total as measured
    assert sum(got.values()) == sum(r.non_torch_delta_bytes for r in rows[1:])
    per_row = [abs(r.non_torch_delta_bytes - c) for r, c in zip(rows[1:], costs, strict=True)]
    fitted = [abs(got[r.bucket] - c) for r, c in zip(rows[1:], costs, strict=True)]
    assert max(per_row) > MIB  # a row is off by up to a step
    assert max(fitted) < 0.1 * MIB  # a twentieth of a step
    # a list of every other bucket: the rows' sum carries their rounding phase, the fit does not
    picked = rows[1::2]
    truth = sum(costs[r.order - 1] for r in picked)
    assert abs(sum(got[r.bucket] for r in picked) - truth) < abs(
        sum(r.non_torch_delta_bytes for r in picked) - truth
    )


def test_without_node_counts_every_later_bucket_costs_the_mean():
    rows = [replace(r, graph_nodes=None) for r in _rows([5 * MIB] * 9, [0] * 10)]
    got = later_executables(rows)
    assert sum(got.values()) == sum(r.non_torch_delta_bytes for r in rows[1:])
    assert max(got.values()) - min(got.values()) <= 1
    assert later_executables(rows[:1]) == {}


# ---------------------------------------------------------------- advise


def test_advice_keeps_the_bands_top_in_the_budget_and_states_the_margin(synthetic):
    alone = predict_buckets(synthetic, [4096], ["per-bucket"]).mode("per-bucket").high_bytes
    advice = advise(synthetic, alone + 20 * MIB, mode="per-bucket")
    m = predict_buckets(synthetic, advice.buckets, ["per-bucket"]).mode("per-bucket")
    assert (advice.high_bytes, advice.low_bytes) == (m.high_bytes, m.low_bytes)
    assert advice.margin_bytes == advice.budget_bytes - m.high_bytes >= 0
    data = advice_json(advice)
    assert data["margin_bytes"] == advice.margin_bytes and data["exact"] is True
    assert data["band_source"] == m.band_source and data["predicted_low_bytes"] == m.low_bytes


def test_the_advice_table_prints_the_margin(synthetic):
    alone = predict_buckets(synthetic, [4096], ["shared"]).mode("shared").high_bytes
    result = CliRunner().invoke(
        app,
        [
            "advise",
            "--from",
            str(synthetic.path),
            "--budget",
            f"{math.ceil((alone + 16 * MIB) / MIB)}MiB",
            "--mode",
            "shared",
        ],
    )
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "margin" in text and "band top" in text and "no held-out lists" in text


# ---------------------------------------------------------------- the file


def test_a_malformed_calibration_is_refused_in_one_sentence(tmp_path):
    with pytest.raises(
        CalibrationError, match="regenerate it with python benchmarks/calibrate_bands.py"
    ):
        parse_calibration({"lists": [{"key": {}}]}, "x.json")
    path = tmp_path / "bands.json"
    path.write_text("{")
    with pytest.raises(CalibrationError, match="cannot read"):
        bands.read_calibration(path)


def test_the_calibration_round_trips(tmp_path):
    cal = shipped_calibration()
    again = bands.read_calibration(bands.write_calibration(cal, tmp_path / "bands.json"))
    assert calibration_json(again) == calibration_json(cal) and cal.lists and cal.layers


def test_a_calibration_written_over_and_cut_short_leaves_the_old_file_whole(tmp_path, monkeypatch):
    import os

    cal = shipped_calibration()
    path = bands.write_calibration(cal, tmp_path / "bands.json")
    before = path.read_bytes()
    real_fsync = os.fsync

    def disk_full(fd):
        real_fsync(fd)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError):
        bands.write_calibration(cal, path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["bands.json"]
