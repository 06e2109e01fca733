"""Prediction bands against the committed reports (bcgprof/analysis/predict/bands.py,
bcgprof/analysis/predict/calibrate.py): the shipped evidence (bcgprof/analysis/predict/bands.json)
holds the lists and figures the committed reports give, every held-out list lies inside the band the
others give it, each traced profile predicts its held-out lists as recorded and inside their bands,
and a prediction's band is stated with its evidence. No GPU: the reports are committed.

That the whole file is what the reports give (every held-out list replayed from each of its eleven
profiles: minutes) is `python benchmarks/calibrate_bands.py --check`, which .ci/run runs; here the
four profiles the replay tests prepare anyway (tests/committed.py) are predicted again, and the rest
is read from the file and the reports. The bands on synthetic data: tests/unit/test_bands.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bcgprof.analysis.predict import bands, calibrate, layers
from bcgprof.analysis.predict.bands import (
    QUANTUM,
    Calibration,
    ListBands,
    leave_one_out,
    run_key,
    shipped_calibration,
)
from bcgprof.analysis.predict.layers import predict_layers
from bcgprof.analysis.predict.lists import predict_buckets
from bcgprof.analysis.predict.needs_free import measured_needs_free_bytes
from bcgprof.analysis.predict.prediction import prediction_json
from bcgprof.report import read_report

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
MIB = 1 << 20
PROFILE = "reports/gpt-oss-20b-h200-traced"
# the profiles tests/regression/test_replay_h200.py prepares, and how many lists each holds out
TRACED = {
    PROFILE: 13,
    "reports/llama-3.1-8b-h200-traced": 8,
    "reports/qwen3-30b-a3b-h200-traced": 7,  # Qwen: + its floor
    "reports/gpt-oss-20b-h100-traced": 2,
}


@pytest.fixture(scope="module")
def cal() -> Calibration:
    return shipped_calibration()


@pytest.fixture(scope="module")
def committed():
    """The committed reports that can serve as evidence, and those passed over (path, why), read as
    the calibration reads them (no replay)."""
    return calibrate._read_all(REPORTS)


def _group(cal, profile):
    (group,) = [e for e in cal.lists if e.profile == profile]
    return group


def _name(report) -> str:
    return calibrate._name(report, REPORTS)


# ---------------------------------------------------------------- the shipped evidence


def test_the_held_out_lists_are_every_committed_list_a_traced_profile_can_predict(cal, committed):
    """Each profile's group holds every committed report of its configuration whose list differs
    from the profile's and lies within its buckets, mode by mode (but those with buckets it cannot
    interpolate), and no other traced report holds any out."""
    reports, _ = committed
    held = {e.profile: e for e in cal.lists}
    profiles, _ = calibrate.profiles_of(reports, REPORTS)
    for profile in profiles:
        key, profiled = run_key(profile.run), profile.run.buckets
        lists = {
            _name(r): r
            for r in reports
            if r.path != profile.path
            and run_key(r.run) == key
            and r.run.buckets != profiled
            and min(profiled) <= min(r.run.buckets) <= max(r.run.buckets) <= max(profiled)
        }
        group = held.pop(_name(profile), None)
        if group is None:
            assert not lists, _name(profile)
            continue
        assert (group.key, group.model, group.gpu) == (key, profile.run.model, profile.run.gpu_name)
        candidates = [
            (name, m)
            for name, r in sorted(lists.items())
            for m in r.modes()
            if m in profile.modes()
        ]
        recorded = [(r.report, r.mode) for r in group.residuals]
        # in the calibration's order
        assert recorded == [c for c in candidates if c in recorded], group.profile
        # only a list the profile cannot interpolate is left out
        for name, m in set(candidates) - set(recorded):
            assert any(x.bucket not in profiled for x in calibrate._mode_rows(lists[name], m)), (
                name,
                m,
            )
    assert not held, f"profiles in bands.json that are no traced committed report: {sorted(held)}"


def test_each_residual_records_what_its_list_measured(cal):
    for group in cal.lists:
        profile = read_report(ROOT / group.profile)
        for r in group.residuals:
            measured = read_report(ROOT / r.report)
            rows = calibrate._mode_rows(measured, r.mode)
            assert r.measured_bytes == calibrate._total(measured, r.mode), (r.report, r.mode)
            assert r.buckets == len(rows), (r.report, r.mode)
            assert r.interpolated == sum(x.bucket not in profile.run.buckets for x in rows), (
                r.report,
                r.mode,
            )


def test_the_layer_checks_are_what_the_committed_layer_sets_predict(cal, committed, monkeypatch):
    """Every layer check, predicted again from the committed layer sets: the same sets, depths,
    figures and bands, except that the pool's spread over address layouts (replayed from traces:
    tests/regression/test_layout_spread.py) is left out here, so a band here lies within the shipped
    one."""
    reports, _ = committed
    monkeypatch.setattr(layers, "layout_spread", lambda *args: None)
    again = calibrate.layer_checks(reports, REPORTS)
    assert [(c.inputs, c.full, c.mode) for c in again] == [
        (c.inputs, c.full, c.mode) for c in cal.layers
    ]
    for new, old in zip(again, cal.layers, strict=True):
        assert replace(new, low_bytes=old.low_bytes, high_bytes=old.high_bytes) == old, (
            old.full,
            old.mode,
        )
        spread = any(calibrate._has_traces(read_report(ROOT / i)) for i in old.inputs[-1:])
        if spread:
            assert old.low_bytes <= new.low_bytes and new.high_bytes <= old.high_bytes, (
                old.full,
                old.mode,
            )
        else:
            assert (new.low_bytes, new.high_bytes) == (old.low_bytes, old.high_bytes), (
                old.full,
                old.mode,
            )
        target = read_report(ROOT / old.full)
        rows = [r for r in target.buckets if r.mode == old.mode and r.rank == 0]
        assert old.measured_needs_free_bytes == measured_needs_free_bytes(rows)


def test_held_out_lists_are_the_other_lists_of_the_traced_profiles_configuration(cal, committed):
    _, skipped = committed
    for profile, count in TRACED.items():
        reports = {r.report for r in _group(cal, profile).residuals}
        reference = profile.removesuffix("-traced")
        assert profile not in reports and reference not in reports  # the profile's own list twice
        assert len(reports) == count and all(r.startswith(reference + "-") for r in reports), (
            profile
        )
    assert "reports/gpt-oss-20b-h200-second-15360-per-bucket" in {
        r.report for r in _group(cal, PROFILE).residuals
    }
    # another order: not a list of this model
    assert any("smallest-first" in path for path, _ in skipped)
    # a list cut short
    assert any("free-3300" in path and "partial" in why for path, why in skipped)


def test_the_leave_one_out_check_is_recorded_and_misses_by_less_than_one_nvml_step(cal):
    """Each held-out list against the band the other lists of its profile give it. The shipped file
    records the count; a list outside misses by less than one NVML step (2 MiB): on the H200 the
    misses are Qwen3-30B-A3B's 4-bucket list (three modes from each of two profiles, -3.6 to -3.9
    MiB against bands of 2.4 to 3.9) and Llama-3.1-8B's 32-bucket list (-4.5 MiB against 4.3)."""
    runs = {e.profile: read_report(ROOT / e.profile).run for e in cal.lists}
    checks = leave_one_out(cal, runs)
    inside = sum(c.inside for c in checks)
    assert cal.leave_one_out == {"inside": inside, "of": len(checks)}
    assert inside >= 0.9 * len(checks)
    for c in checks:
        e = c.residual.error_bytes
        beyond = max(-c.band.below - e, e - c.band.above, 0)
        assert beyond < QUANTUM, (c.residual.report, c.residual.mode, e / MIB)


def test_the_residuals_are_small_and_of_both_signs(cal):
    """The executables read from the staircase leave errors of both signs, under 0.5% on every list
    and mode (under 0.2% on gpt-oss-20b): the per-row deltas they replaced were 12 to 22 MiB low on
    every list of 27 buckets or more."""
    errors = [r.error_bytes / r.measured_bytes for e in cal.lists for r in e.residuals]
    assert max(abs(e) for e in errors) < 0.005
    assert (
        max(abs(r.error_bytes / r.measured_bytes) for r in _group(cal, PROFILE).residuals) < 0.002
    )
    assert min(errors) < 0 < max(errors)


# ---------------------------------------------------------------- list bands


def test_every_committed_list_is_inside_its_band_and_the_band_is_under_two_percent(cal):
    """From the residuals alone, for every profile: each list's recorded prediction, with the band
    the evidence gives a list of its length, holds what it measured, and the band is under 2%."""
    for group in cal.lists:
        run = read_report(ROOT / group.profile).run
        for r in group.residuals:
            band = ListBands(run, r.mode, cal, profile=group.profile).band(
                r.buckets, r.interpolated
            )
            assert (
                r.predicted_bytes - band.below <= r.measured_bytes <= r.predicted_bytes + band.above
            ), r
            assert band.below + band.above <= 0.02 * r.predicted_bytes, r


@pytest.mark.parametrize("profile", list(TRACED))
def test_a_traced_profile_predicts_its_held_out_lists_as_recorded_and_inside_their_bands(
    profile, cal, committed_profiles
):
    # prepared once for the session: the lists replay from its cache
    report, p = committed_profiles(profile)
    group = _group(cal, profile)
    for r in group.residuals:
        measured = read_report(ROOT / r.report)
        rows = sorted((x for x in measured.buckets if x.mode == r.mode), key=lambda x: x.order)
        m = predict_buckets(report, [x.bucket for x in rows], [r.mode], profile=p).mode(r.mode)
        assert m is not None and m.exact == (not r.interpolated)
        assert m.low_bytes <= r.measured_bytes <= m.high_bytes, (r.report, r.mode)
        point = m.device_used_bytes
        # the band spans both placements: flagged when wide
        if m.other_placement_pool_bytes is not None:
            other = point + m.other_placement_pool_bytes - m.pool_bytes
            assert r.predicted_bytes == min((point, other), key=lambda v: abs(r.measured_bytes - v))
            assert m.band_too_wide == (m.high_bytes - m.low_bytes > 0.02 * m.device_used_bytes)
            continue
        assert r.predicted_bytes == point, (r.report, r.mode)
        assert not m.band_too_wide and m.high_bytes - m.low_bytes <= 0.02 * m.device_used_bytes
        # a list drawn from the profile's buckets is banded by such lists only; one with buckets the
        # profile lacked, by all (one exact list on the H100: its own residual is its band)
        lists = len({x.report for x in group.residuals if r.interpolated or not x.interpolated})
        assert (
            m.band_lists >= min(2, lists)
            and f"held-out list(s) of {report.run.model} on {group.gpu}" in m.band_source
        )


def test_the_json_states_the_band_and_its_evidence(committed_profiles):
    report, p = committed_profiles(PROFILE)
    data = prediction_json(predict_buckets(report, [4096, 8192, 16384], profile=p))
    for m in data["modes"]:
        assert m["exact"] is True
        assert (m["band_low_bytes"], m["band_high_bytes"]) == (m["low_bytes"], m["high_bytes"])
        assert m["band_low_bytes"] < m["device_used_bytes"] < m["band_high_bytes"]
        assert (
            m["band_lists"] >= 3
            and m["band_max_abs_error_bytes"] >= 0
            and m["band_too_wide"] is False
        )
        # 3 buckets: shorter than every list held out
        half = m["band_max_abs_error_bytes"] + QUANTUM
        assert m["band_high_bytes"] - m["device_used_bytes"] == half


# ---------------------------------------------------------------- layer bands


def test_layer_bands_hold_on_every_full_depth_capture_within_half_a_percent(cal):
    # Every model with a committed layer set and a full-depth capture of it; gpt-oss-120b and
    # Llama-3.1-70B were captured at full depth with one-layer weights (too large for the card
    # otherwise). (Qwen3-8B on an H100 80GB).
    assert {c.model for c in cal.layers} == {
        "gpt-oss-20b",
        "gpt-oss-120b",
        "Llama-3.1-8B",
        "Llama-3.1-70B",
        "Qwen3-30B-A3B",
        "Qwen3-8B",
    }
    for c in cal.layers:
        assert c.inside, (c.model, c.mode)
        # its pool moves with the layout (up to 7.2% off), and the band spans the layouts
        if (c.model, c.mode) == ("Qwen3-8B", "per-bucket"):
            assert c.low_bytes <= c.predicted_bytes - 271 * 2**20, c.layers
            continue
        assert abs(c.predicted_bytes - c.measured_bytes) <= 0.005 * c.measured_bytes, (
            c.model,
            c.mode,
        )
    # every deeper depth captured is a check, not only the full one: 2+4 against 8, 16 and 32
    # layers, and 8+16 against 32
    llama = {
        (tuple(int(i.rsplit("-", 1)[1]) for i in c.inputs), c.layers)
        for c in cal.layers
        if c.model == "Llama-3.1-8B"
    }
    assert llama == {((2, 4), 8), ((2, 4), 16), ((2, 4), 32), ((8, 16), 32)}


def test_a_layer_predictions_band_cites_its_check():
    reports = [read_report(ROOT / f"reports/llama-3.1-8b-h200-layers/layers-{k}") for k in (2, 4)]
    pred = predict_layers(reports)
    checks = len(bands.shipped_calibration().layers)
    # seven full-depth captures of six models (four modes each), Llama-3.1-8B and
    assert checks == 68
    # Qwen3-30B-A3B also at 8 and 16 layers and at full depth from 8+16, Qwen3-8B (H200) at 8, 16
    # and 24 and at full depth from 8+16+24
    for m in pred.modes:
        assert (
            "a formula" in m.band_source
            and f"{checks} of {checks} mode totals inside their band" in m.band_source
        )
        assert "this model is among them" in m.band_source and not m.exact
