"""Buckets the profile did not capture, interpolated between the profiled buckets around them (no
GPU).

On the synthetic profile (tests/traced_profile.py, whose requests are lines in tokens) an
interpolated bucket's events are the ones its own capture makes, so a list with buckets that
were never profiled predicts what capturing it gives, row by row. On the committed H200 traces:
tests/regression/test_interpolate.py.
"""

from __future__ import annotations

import pytest

from bcgprof.analysis.predict.fold import ALLOC, FREE
from bcgprof.analysis.predict.interpolate import Pattern, line_size, line_sizes
from bcgprof.analysis.predict.lists import predict_buckets
from bcgprof.analysis.predict.prediction import prediction_json
from tests.interpolation_oracle import interpolate_ops

from traced_profile import MODES, capture, write_profile


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return write_profile(tmp_path_factory.mktemp("traced") / "profile")


def test_a_size_is_on_the_line_between_the_neighbours_rounded_up():
    assert line_size(1024, 512, 1000, 2048, 4000) == 2000
    assert line_size(600, 512, 1000, 1024, 2001) == 1173  # 1172.05 rounds up
    assert line_size(700, 512, 64, 1024, 64) == 64  # a size that does not change with tokens stays


@pytest.mark.parametrize("top", [1 << 20, (1 << 62) - 1])  # whole arrays; one by one (63 bits)
def test_sizes_on_the_line_are_the_same_as_arrays_or_one_by_one(top):
    import numpy as np

    low = np.array([0, 1000, 64, 3, top - 7, top, 1], dtype=np.int64)
    high = np.array([512, 4000, 64, 7, top, 5, top], dtype=np.int64)
    none = np.zeros(len(low), dtype=np.int64)
    for lower, upper in ((512, 1024), (1, 16384), (600, 602)):
        p = Pattern(lower, upper, none, none, low, high, none, none)
        for bucket in range(lower + 1, upper, max(1, (upper - lower) // 37)):
            expected = [
                line_size(bucket, lower, a, upper, b) for a, b in zip(low.tolist(), high.tolist())
            ]
            assert line_sizes(bucket, p).tolist() == expected


def test_neighbours_whose_events_differ_in_more_than_sizes_are_refused():
    lower = [(ALLOC, 100, 0, 1, 0, 0), (FREE, 1)]
    upper = [(ALLOC, 200, 0, 7, 0, 0), (ALLOC, 8, 0, 8, 0, 0), (FREE, 7)]
    ops, why = interpolate_ops(150, 100, lower, 200, upper, 1 << 40)
    assert ops == [] and "differ in more than their sizes" in why
    ops, why = interpolate_ops(150, 100, lower, 200, [(ALLOC, 200, 1, 7, 0, 0), (FREE, 7)], 1 << 40)
    assert ops == [] and why  # another stream
    ops, why = interpolate_ops(150, 100, lower, 200, [(ALLOC, 200, 0, 7, 5, 0), (FREE, 7)], 1 << 40)
    assert why == "" and ops == [(ALLOC, 150, 0, (1 << 40) | 1, 0, -1), (FREE, (1 << 40) | 1)]


@pytest.mark.parametrize("mode", MODES)
def test_a_list_with_buckets_never_profiled_predicts_what_capturing_it_gives(profile, mode):
    for chosen in ([3584, 2560, 768, 96], [4096, 3000, 1100, 200], [2500, 700], [4000, 65]):
        measured, _ = capture(mode, chosen)
        pred = predict_buckets(profile, chosen, [mode]).mode(mode)
        assert [r.pool_bytes for r in pred.buckets] == [r.pool_bytes for r in measured], chosen
        drawn = [r.bucket for r in pred.buckets if r.interpolated_from]
        kept = sorted(chosen, reverse=True)[:1] if mode == "floor" else sorted(chosen, reverse=True)
        assert drawn == [b for b in kept if b not in profile.run.buckets]
        assert pred.exact == (not drawn)  # interpolated events are not recorded ones


def test_interpolated_rows_are_labelled_in_the_json_and_the_notes(profile):
    pred = predict_buckets(profile, [4096, 2500, 64])
    data = prediction_json(pred)
    rows = {r["bucket"]: r for r in data["modes"][0]["rows"]}
    assert (
        rows[2500]["interpolated_from"] == [2048, 3072] and rows[4096]["interpolated_from"] is None
    )
    assert any(
        n.startswith("interpolated (not profiled") and "2500 (2048-3072)" in n for n in pred.notes
    )
    assert all(m["exact"] is False for m in data["modes"] if m["mode"] != "floor")
    per_bucket = next(m for m in pred.modes if m.mode == "per-bucket")
    retained = {r.bucket: r.retained_output_bytes for r in per_bucket.buckets}
    assert retained[2500] == (retained[64] // 64) * 2500  # an output is rows x width
