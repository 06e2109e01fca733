"""Prediction bands from measured residuals (bcgprof/analysis/bands.py, bcgprof/analysis/calibrate.py, bcgprof/analysis/executables.py):
the shipped evidence is what the committed reports give, every held-out list lies inside the band the
others give it, a list prediction's band is stated with its evidence (or the lack of it), and advise keeps
the band's top within the budget and prints the margin. No GPU: the reports are committed."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bcgprof.analysis import bands
from bcgprof.analysis.advise import advice_json, advise
from bcgprof.analysis.bands import (
    QUANTUM,
    Calibration,
    CalibrationError,
    ListBands,
    ListEvidence,
    Residual,
    calibration_json,
    leave_one_out,
    parse_calibration,
    run_key,
    shipped_calibration,
)
from bcgprof.analysis.calibrate import build
from bcgprof.analysis.executables import later_executables
from bcgprof.analysis.predict import predict_buckets, predict_layers, prediction_json
from bcgprof.cli import app
from bcgprof.report import BucketRecord, RunInfo, read_report

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
PROFILE = "reports/gpt-oss-20b-h200-traced"


_PREPARED: dict = {}  # report name -> its prepared profile, as the calibration replayed it (shared, not rebuilt)


@pytest.fixture(scope="module")
def built():
    return build(ROOT / "reports", _PREPARED)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A traced profile of a configuration no committed report shares (tests/traced_profile.py)."""
    from traced_profile import write_profile

    return write_profile(tmp_path_factory.mktemp("bands") / "profile")


# ---------------------------------------------------------------- the shipped evidence


def test_the_shipped_calibration_is_what_the_committed_reports_give(built):
    cal, _ = built
    shipped = json.loads((ROOT / "bcgprof" / "analysis" / "bands.json").read_text())
    assert calibration_json(cal) == shipped, "bcgprof/analysis/bands.json is stale: run python benchmarks/calibrate_bands.py"


TRACED = {PROFILE: 13, "reports/llama-3.1-8b-h200-traced": 8, "reports/qwen3-30b-a3b-h200-traced": 7,  # Qwen: + its floor
          "reports/gpt-oss-20b-h100-traced": 2}


def _group(cal, profile):
    (group,) = [e for e in cal.lists if e.profile == profile]
    return group


def test_held_out_lists_are_the_other_lists_of_the_traced_profiles_configuration(built):
    cal, skipped = built
    for profile, count in TRACED.items():
        reports = {r.report for r in _group(cal, profile).residuals}
        reference = profile.removesuffix("-traced")
        assert profile not in reports and reference not in reports  # the profile's own list twice
        assert len(reports) == count and all(r.startswith(reference + "-") for r in reports), profile
    assert "reports/gpt-oss-20b-h200-second-15360-per-bucket" in {r.report for r in _group(cal, PROFILE).residuals}
    assert any("smallest-first" in path for path, _ in skipped)  # another order: not a list of this model
    assert any("free-3300" in path and "partial" in why for path, why in skipped)  # a list cut short


def test_the_leave_one_out_check_is_recorded_and_misses_by_less_than_one_nvml_step(built):
    """Each held-out list against the band the other lists of its profile give it. The shipped file records
    the count; a list outside misses by less than one NVML step (2 MiB): on the H200 the misses are
    Qwen3-30B-A3B's 4-bucket list (three modes from each of two profiles, -3.6 to -3.9 MiB against bands of 2.4 to 3.9) and
    Llama-3.1-8B's 32-bucket list (-4.5 MiB against 4.3)."""
    cal, _ = built
    runs = {e.profile: read_report(ROOT / e.profile).run for e in cal.lists}
    checks = leave_one_out(cal, runs)
    inside = sum(c.inside for c in checks)
    assert cal.leave_one_out == {"inside": inside, "of": len(checks)}
    assert inside >= 0.9 * len(checks)
    for c in checks:
        e = c.residual.error_bytes
        beyond = max(-c.band.below - e, e - c.band.above, 0)
        assert beyond < QUANTUM, (c.residual.report, c.residual.mode, e / MIB)


def test_the_residuals_are_small_and_of_both_signs(built):
    """The executables read from the staircase leave errors of both signs, under 0.5% on every list and
    mode (under 0.2% on gpt-oss-20b): the per-row deltas they replaced were 12 to 22 MiB low on every
    list of 27 buckets or more."""
    cal, _ = built
    errors = [r.error_bytes / r.measured_bytes for e in cal.lists for r in e.residuals]
    assert max(abs(e) for e in errors) < 0.005
    assert max(abs(r.error_bytes / r.measured_bytes) for r in _group(cal, PROFILE).residuals) < 0.002
    assert min(errors) < 0 < max(errors)


# ---------------------------------------------------------------- list bands


def test_every_committed_list_is_inside_its_band_and_the_band_is_under_two_percent(built):
    cal, _ = built
    for group in cal.lists:
        profile = read_report(ROOT / group.profile)
        p = _PREPARED[group.profile]  # the calibration's own replays are cached there: predicted again, not replayed
        for r in group.residuals:
            measured = read_report(ROOT / r.report)
            rows = sorted((x for x in measured.buckets if x.mode == r.mode), key=lambda x: x.order)
            m = predict_buckets(profile, [x.bucket for x in rows], [r.mode], profile=p).mode(r.mode)
            assert m is not None and m.exact == (not r.interpolated)
            assert m.low_bytes <= r.measured_bytes <= m.high_bytes, (r.report, r.mode)
            if m.other_placement_pool_bytes is not None:  # the band spans both placements: flagged when wide
                assert m.band_too_wide == (m.high_bytes - m.low_bytes > 0.02 * m.device_used_bytes)
                continue
            assert not m.band_too_wide and m.high_bytes - m.low_bytes <= 0.02 * m.device_used_bytes
            # a list drawn from the profile's buckets is banded by such lists only; one with buckets the profile
            # lacked, by all (one exact list on the H100: its own residual is its band)
            lists = len({x.report for x in group.residuals if r.interpolated or not x.interpolated})
            assert m.band_lists >= min(2, lists) and f"held-out list(s) of {profile.run.model} on {group.gpu}" in m.band_source


def test_the_json_states_the_band_and_its_evidence():
    data = prediction_json(predict_buckets(read_report(ROOT / PROFILE), [4096, 8192, 16384]))
    for m in data["modes"]:
        assert m["exact"] is True
        assert (m["band_low_bytes"], m["band_high_bytes"]) == (m["low_bytes"], m["high_bytes"])
        assert m["band_low_bytes"] < m["device_used_bytes"] < m["band_high_bytes"]
        assert m["band_lists"] >= 3 and m["band_max_abs_error_bytes"] >= 0 and m["band_too_wide"] is False
        half = m["band_max_abs_error_bytes"] + QUANTUM  # 3 buckets: shorter than every list held out
        assert m["band_high_bytes"] - m["device_used_bytes"] == half


def test_a_profile_without_held_out_lists_says_so_and_claims_one_step_per_bucket(synthetic):
    pred = predict_buckets(synthetic, [512, 1024, 4096])
    for m in pred.modes:
        n = len(m.buckets)
        assert m.band_lists == 0 and m.band_max_abs_error_bytes is None
        assert "no held-out lists of synthetic" in m.band_source and "not evidence" in m.band_source
        assert (m.device_used_bytes - m.low_bytes, m.high_bytes - m.device_used_bytes) == (n * QUANTUM, n * QUANTUM)


def _calibration(run: RunInfo, *residuals: Residual) -> Calibration:
    return Calibration(lists=(ListEvidence(run_key(run), run.model, run.gpu_name, "reports/elsewhere", residuals),))


def test_a_longer_list_than_any_held_out_grows_the_band_in_proportion(synthetic):
    cal = _calibration(synthetic.run, Residual("a", "shared", 4, 100 * MIB, 100 * MIB + 3 * MIB),
                       Residual("b", "shared", 2, 100 * MIB, 100 * MIB - MIB))
    b = ListBands(synthetic.run, "shared", cal, profile="reports/mine")
    assert (b.band(3).below, b.band(3).above) == (3 * MIB + QUANTUM, 3 * MIB + QUANTUM)
    assert b.band(4).above == 3 * MIB + QUANTUM and b.band(8).above == 6 * MIB + QUANTUM
    assert "grown x2.00" in b.band(8).source and "grown" not in b.band(4).source
    assert "predicted from reports/elsewhere" in b.band(3).source
    assert ListBands(synthetic.run, "per-bucket", cal).band(3).lists == 0  # evidence is per mode


def test_evidence_counts_only_for_the_same_configuration(synthetic):
    cal = _calibration(synthetic.run, Residual("a", "shared", 4, 100 * MIB, 101 * MIB))
    assert ListBands(synthetic.run, "shared", cal).band(3).lists == 1
    for change in ({"driver": "999.0"}, {"torch_version": "9.9"}, {"gpu_name": "another GPU"}, {"layers": 7},
                   {"experts": "packed"}):
        assert ListBands(replace(synthetic.run, **change), "shared", cal).band(3).lists == 0, change


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
    """One mode's rows whose executables cost ``costs`` each (bytes), read as NVML does: a running total
    rounded down to ``step``."""
    rows, true, read = [BucketRecord(mode="shared", bucket=10_000, order=0, status="ok", graph_nodes=nodes[0],
                                     non_torch_delta_bytes=first)], 0.0, 0
    for i, (c, n) in enumerate(zip(costs, nodes[1:], strict=True), start=1):
        true += c
        now = int(true // step) * step
        rows.append(BucketRecord(mode="shared", bucket=10_000 - i, order=i, status="ok", graph_nodes=n,
                                 non_torch_delta_bytes=now - read))
        read = now
    return rows


def test_each_buckets_executables_come_from_the_staircase_not_its_rounded_row():
    nodes = [2400] + [2000 + 7 * (i % 70) for i in range(73)]
    costs = [4 * MIB + 1800 * n for n in nodes[1:]]  # a fixed cost per bucket and one per kernel node
    rows = _rows(costs, nodes)
    got = later_executables(rows)
    assert sum(got.values()) == sum(r.non_torch_delta_bytes for r in rows[1:])  # the total as measured
    per_row = [abs(r.non_torch_delta_bytes - c) for r, c in zip(rows[1:], costs, strict=True)]
    fitted = [abs(got[r.bucket] - c) for r, c in zip(rows[1:], costs, strict=True)]
    assert max(per_row) > MIB  # a row is off by up to a step
    assert max(fitted) < 0.1 * MIB  # a twentieth of a step
    # a list of every other bucket: the rows' sum carries their rounding phase, the fit does not
    picked = rows[1::2]
    truth = sum(costs[r.order - 1] for r in picked)
    assert abs(sum(got[r.bucket] for r in picked) - truth) < abs(sum(r.non_torch_delta_bytes for r in picked)
                                                                   - truth)


def test_without_node_counts_every_later_bucket_costs_the_mean():
    rows = [replace(r, graph_nodes=None) for r in _rows([5 * MIB] * 9, [0] * 10)]
    got = later_executables(rows)
    assert sum(got.values()) == sum(r.non_torch_delta_bytes for r in rows[1:])
    assert max(got.values()) - min(got.values()) <= 1
    assert later_executables(rows[:1]) == {}


# ---------------------------------------------------------------- layer bands


def test_layer_bands_hold_on_every_full_depth_capture_within_half_a_percent(built):
    cal, _ = built
    # Every model with a committed layer set and a full-depth capture of it; gpt-oss-120b and Llama-3.1-70B
    # were captured at full depth with shared weights (too large for the card otherwise).
    # (Qwen3-8B on an H100 80GB).
    assert {c.model for c in cal.layers} == {"gpt-oss-20b", "gpt-oss-120b", "Llama-3.1-8B", "Llama-3.1-70B",
                                             "Qwen3-30B-A3B", "Qwen3-8B"}
    for c in cal.layers:
        assert c.inside, (c.model, c.mode)
        if (c.model, c.mode) == ("Qwen3-8B", "per-bucket"):  # its pool moves with the layout (up to 7.2% off),
            assert c.low_bytes <= c.predicted_bytes - 271 * 2**20, c.layers  # and the band spans the layouts
            continue
        assert abs(c.predicted_bytes - c.measured_bytes) <= 0.005 * c.measured_bytes, (c.model, c.mode)
    # every deeper depth captured is a check, not only the full one: 2+4 against 8, 16 and 32 layers, and
    # 8+16 against 32
    llama = {(tuple(int(i.rsplit("-", 1)[1]) for i in c.inputs), c.layers) for c in cal.layers
             if c.model == "Llama-3.1-8B"}
    assert llama == {((2, 4), 8), ((2, 4), 16), ((2, 4), 32), ((8, 16), 32)}


def test_a_layer_predictions_band_cites_its_check():
    reports = [read_report(ROOT / f"reports/llama-3.1-8b-h200-layers/layers-{k}") for k in (2, 4)]
    pred = predict_layers(reports)
    checks = len(bands.shipped_calibration().layers)
    assert checks == 68  # seven full-depth captures of six models (four modes each), Llama-3.1-8B and
    # Qwen3-30B-A3B also at 8 and 16 layers and at full depth from 8+16, Qwen3-8B (H200) at 8, 16 and 24 and
    # at full depth from 8+16+24
    for m in pred.modes:
        assert "a formula" in m.band_source and f"{checks} of {checks} mode totals inside their band" in m.band_source
        assert "this model is among them" in m.band_source and not m.exact


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
    result = CliRunner().invoke(app, ["advise", "--from", str(synthetic.path), "--budget",
                                      f"{math.ceil((alone + 16 * MIB) / MIB)}MiB", "--mode", "shared"])
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "margin" in text and "band top" in text and "no held-out lists" in text


# ---------------------------------------------------------------- the file


def test_a_malformed_calibration_is_refused_in_one_sentence(tmp_path):
    with pytest.raises(CalibrationError, match="regenerate it with python benchmarks/calibrate_bands.py"):
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
