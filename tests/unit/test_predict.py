"""Predictions from synthetic reports (no GPU): layer extrapolation, the advisor's optimisation
against brute force on a traced profile, and the refusals (bucket lists themselves:
tests/unit/test_replay.py; against the committed H200 reports: tests/regression/test_predict.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bcgprof.analysis.predict.advise import (
    AdviceError,
    advise,
    brute_force,
    optimise,
    padding_of,
    read_lengths,
)
from bcgprof.analysis.predict.layers import predict_layers
from bcgprof.analysis.predict.lists import PredictionError, bucket_profile, predict_buckets
from bcgprof.report import BucketRecord, ReportWriter, RunInfo, read_report

MIB = 1 << 20


def _synthetic(tmp_path, layers: int, name: str | None = None, **run_changes):
    """A report whose figures follow the layer laws exactly: pool constant, graphs L+1, nodes 90 a
    layer, executables 200 KiB a graph + 1 KiB a node, outputs per bucket."""
    # run.json's, captured largest first
    buckets = sorted(run_changes.get("buckets", [4096, 2048, 1024, 512, 256]), reverse=True)
    rows = []
    for mode in ("per-bucket", "shared", "floor"):
        pool = 0
        for order, b in enumerate(buckets if mode != "floor" else buckets[:1]):
            segments, nodes = layers + 1, 90 * layers + 10
            non_torch = 200 * 1024 * segments + 1024 * nodes + (4 * MIB if order == 0 else 0)
            out = b * 2880 * 2
            if order == 0:
                pool_delta = 300 * MIB
            else:
                pool_delta = 2 * MIB if (mode == "per-bucket" and order >= 3) else 0
            outside = out if (mode == "shared" and order == 0) else 0
            pool += pool_delta
            rows.append(
                BucketRecord(
                    mode=mode,
                    bucket=b,
                    order=order,
                    status="ok",
                    segments=segments,
                    graph_nodes=nodes,
                    pool_bytes=pool,
                    pool_delta_bytes=pool_delta,
                    retained_output_bytes=out if (mode != "shared" or order == 0) else 0,
                    torch_reserved_delta_bytes=pool_delta + outside,
                    device_used_delta_bytes=pool_delta + outside + non_torch,
                    non_torch_delta_bytes=non_torch,
                    peak_transient_bytes=b * 70000,
                    # the warm-up's cache on top of what the bucket keeps: one layer's
                    # working set, the same at any depth
                    device_peak_delta_bytes=pool_delta + outside + non_torch + b * 9000,
                )
            )
    run = RunInfo(
        model="gpt-oss-20b",
        layers=layers,
        buckets=sorted(buckets),
        modes=["per-bucket", "shared", "floor"],
        gpu_name="NVIDIA H200",
        config_hash="h",
        status="complete",
        hidden_size=2880,
        dtype="bfloat16",
    )
    run = dataclasses.replace(run, **run_changes)
    ReportWriter(tmp_path / (name or f"l{layers}"), run, rows)
    return read_report(tmp_path / (name or f"l{layers}"))


def test_layer_extrapolation_reproduces_a_capture_that_follows_the_laws(tmp_path):
    two, four, twelve = (_synthetic(tmp_path, n) for n in (2, 4, 12))
    pred = predict_layers([two, four], layers=12)
    assert pred.label == "predicted, not measured" and pred.layers == 12
    truth = {s.mode: s for s in twelve.summary}
    for m in pred.modes:
        assert (
            abs(m.device_used_bytes - truth[m.mode].device_used_bytes)
            <= 0.001 * truth[m.mode].device_used_bytes
        )
        assert m.low_bytes <= m.device_used_bytes <= m.high_bytes
        assert m.pool_bytes == truth[m.mode].pool_bytes
    row = next(r for r in pred.mode("per-bucket").buckets if r.bucket == 1024)
    assert (row.segments, row.graph_nodes) == (13, 90 * 12 + 10)


def test_the_free_memory_a_deeper_capture_needs_adds_the_executables_not_the_warm_up(tmp_path):
    from bcgprof.analysis.predict.needs_free import measured_needs_free_bytes

    two, four, twelve = (_synthetic(tmp_path, n) for n in (2, 4, 12))
    pred = predict_layers([two, four], layers=12, free=1 << 30)
    for m in pred.modes:
        truth = measured_needs_free_bytes([r for r in twelve.buckets if r.mode == m.mode])
        shallow = measured_needs_free_bytes([r for r in four.buckets if r.mode == m.mode])
        assert truth > shallow  # twelve layers keep more executables before the tightest bucket
        assert abs(m.needs_free.needs_free_bytes - truth) <= 0.001 * truth, m.mode
        assert m.needs_free.band_bytes > 0 and m.needs_free.fits


@pytest.mark.parametrize(
    "change, message",
    [
        ({"config_hash": "other"}, "differ in models"),
        ({"gpu_name": "NVIDIA B200"}, "differ in GPUs"),
        ({"buckets": [1, 2]}, "differ in bucket lists"),
        ({"moe": "sglang-mxfp4"}, "differ in MoE workspaces"),
        ({"executables": "per-signature"}, "differ in graph executables"),
        ({"experts": "packed"}, "differ in expert weights"),
        ({"extra": {"warmup_output": "freed"}}, "differ in warm-up outputs"),
    ],
)
def test_layer_prediction_refuses_reports_that_differ_in_more_than_layers(
    tmp_path, change, message
):
    two = _synthetic(tmp_path, 2)
    four = _synthetic(tmp_path, 4, **change)
    with pytest.raises(PredictionError, match=message):
        predict_layers([two, four], layers=24)


def test_layer_prediction_needs_two_layer_counts(tmp_path):
    two = _synthetic(tmp_path, 2)
    with pytest.raises(PredictionError, match="two or more layer counts"):
        predict_layers([two], layers=24)
    again = _synthetic(tmp_path, 2, name="again")
    with pytest.raises(PredictionError, match="all reports have 2 layers"):
        predict_layers([two, again], layers=24)


# ---------------------------------------------------------------- the advisor


@pytest.mark.parametrize("seed", range(6))
def test_the_optimiser_finds_the_brute_force_optimum(seed):
    rng = np.random.default_rng(seed)
    candidates = sorted(rng.choice(np.arange(4, 200), size=7, replace=False).tolist())
    costs = rng.integers(1, 9, size=len(candidates)).tolist()
    costs[-1] = 0
    weights = np.zeros(candidates[-1] + 1)
    weights[1:] = rng.random(candidates[-1])
    fixed = 10
    for budget in (10, 14, 20, 30, 60):
        chosen, _ = optimise(candidates, costs, fixed, budget, weights)
        _, expected_pad = brute_force(candidates, costs, fixed, budget, weights)
        assert padding_of(chosen, weights) == pytest.approx(expected_pad)
        assert (
            fixed + sum(costs[candidates.index(b)] for b in chosen if b != candidates[-1]) <= budget
        )
        assert candidates[-1] in chosen


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A synthetic profile with allocator traces (tests/traced_profile.py): list predictions
    replay it."""
    from traced_profile import write_profile

    return write_profile(tmp_path_factory.mktemp("advise") / "profile")


def test_advice_fits_the_budget_and_more_budget_never_pads_more(traced):
    alone = predict_buckets(traced, [4096], ["per-bucket"]).mode("per-bucket").high_bytes
    small = advise(traced, alone + 12 * MIB, mode="per-bucket")
    large = advise(traced, alone + 40 * MIB, mode="per-bucket")
    assert small.high_bytes <= alone + 12 * MIB and large.high_bytes <= alone + 40 * MIB
    assert 4096 in small.buckets and large.expected_padding_pct <= small.expected_padding_pct
    assert len(large.buckets) > len(small.buckets)
    pads = [p for _, p, _ in large.curve]
    assert pads == sorted(pads, reverse=True)  # the trade-off curve falls as the budget grows
    assert small.spec == ",".join(map(str, small.buckets))
    exact = predict_buckets(traced, small.buckets, ["per-bucket"]).mode("per-bucket")
    assert (small.predicted_bytes, small.high_bytes) == (exact.device_used_bytes, exact.high_bytes)


def test_advice_with_observed_lengths_puts_buckets_where_the_lengths_are(tmp_path, traced):
    path = tmp_path / "lengths.csv"
    path.write_text("tokens\n" + "\n".join(["1000"] * 50 + ["3000"] * 50 + ["20000"]) + "\n")
    lengths = read_lengths(path)
    assert len(lengths) == 101
    budget = predict_buckets(traced, [4096], ["shared"]).mode("shared").high_bytes + 8 * MIB
    advice = advise(traced, budget, mode="shared", lengths=lengths)
    assert 1024 in advice.buckets and 3072 in advice.buckets


def test_advice_refuses_a_budget_below_the_largest_bucket_and_bad_lengths(tmp_path, traced):
    with pytest.raises(AdviceError, match="above the budget"):
        advise(traced, 10 * MIB, mode="shared")
    bad = tmp_path / "bad.csv"
    bad.write_text("tokens\n12\nabc\n")
    with pytest.raises(AdviceError, match="not a token count"):
        read_lengths(bad)


@pytest.mark.parametrize("mode", ["shared", "per-bucket", "shared-largest"])
def test_advice_matches_a_brute_force_search_over_exact_predictions(mode, traced):
    """Every sublist (with the largest) is predicted exactly, and the least padded one within the
    budget (at the top of its band) is the advice: the lists the advisor does not replay could not
    have fitted."""
    from itertools import combinations

    picked = sorted(traced.run.buckets)
    weights = np.zeros(picked[-1] + 1)
    weights[1:] = 1.0
    profile = bucket_profile(traced)  # prepared once: every sublist below replays from it
    alone = predict_buckets(traced, [picked[-1]], [mode], profile=profile).mode(mode).high_bytes
    everything = predict_buckets(traced, picked, [mode], profile=profile).mode(mode).high_bytes
    for budget in np.linspace(alone, everything, 5).astype(int).tolist():
        best = None
        for k in range(len(picked)):
            for sub in combinations(picked[:-1], k):
                chosen = [*sub, picked[-1]]
                pred = predict_buckets(traced, chosen, [mode], profile=profile).mode(mode)
                if pred.high_bytes > budget:
                    continue
                key = (padding_of(chosen, weights), pred.high_bytes)
                if best is None or key < best[0]:
                    best = (key, chosen)
        advice = advise(traced, budget, mode=mode)
        assert padding_of(advice.buckets, weights) == pytest.approx(best[0][0]), (
            budget,
            advice.buckets,
            best[1],
        )


def test_the_executable_staircase_slope_is_finer_than_nvml_steps():
    """Each bucket adds c bytes; NVML shows the running total in 2 MiB steps. The staircase's slope
    recovers c to well under a percent where the total over the buckets is off by up to a step."""
    from bcgprof.analysis.predict.executables import staircase_slope

    for c in (0.61 * MIB, 1.47 * MIB, 7.93 * MIB):
        seen, rows = 0, []
        for k in range(1, 74):
            now = -(-int(k * c + 0.3 * MIB) // (2 * MIB)) * 2 * MIB
            rows.append(
                BucketRecord(
                    mode="shared", bucket=k, order=k, status="ok", non_torch_delta_bytes=now - seen
                )
            )
            seen = now
        slope, error = staircase_slope(rows)
        assert abs(slope - c) <= 0.005 * c, (c, slope)
        assert error < 0.01 * MIB


def test_a_shallow_deepest_capture_widens_the_band_by_its_pools_change(tmp_path):
    """From 1 and 2 layers (below the depth where the pool settles) the pool comes from the 2-layer
    capture and the band covers how much it moved from the 1-layer one."""
    one = _synthetic(tmp_path, 1)
    moved = [
        dataclasses.replace(
            r,
            pool_delta_bytes=r.pool_delta_bytes + 40 * MIB,
            torch_reserved_delta_bytes=r.torch_reserved_delta_bytes + 40 * MIB,
            device_used_delta_bytes=r.device_used_delta_bytes + 40 * MIB,
        )
        if r.order == 0
        else r
        for r in one.buckets
    ]
    ReportWriter(tmp_path / "l1-moved", one.run, moved)
    shallow = read_report(tmp_path / "l1-moved")
    two = _synthetic(tmp_path, 2)
    settled = predict_layers([_synthetic(tmp_path, 1, name="plain"), two], layers=8)
    widened = predict_layers([shallow, two], layers=8)
    for a, b in zip(settled.modes, widened.modes):
        # the pool is the 2-layer capture's either way
        assert a.device_used_bytes == b.device_used_bytes
        assert b.high_bytes - b.device_used_bytes == a.high_bytes - a.device_used_bytes + 40 * MIB
    assert any("fewer than 4" in n for n in widened.notes)


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_a_depth_below_where_the_pool_settles_is_refused(tmp_path, layers):
    two, four = _synthetic(tmp_path, 2), _synthetic(tmp_path, 4)
    with pytest.raises(PredictionError, match="below 4, where the graph pool settles"):
        predict_layers([two, four], layers=layers)
    assert predict_layers([two, four], layers=4).layers == 4
