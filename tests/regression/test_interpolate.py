"""Buckets the profile did not capture, interpolated on the committed H200 traces (no GPU): a
profiled bucket left out and interpolated from its neighbours gives the profile's own rows back, and
lists captured on the H200 are predicted from other, sparser traced lists: pool rows as measured
where the two segment placements agree, and the measured device used inside the band everywhere. On
a synthetic profile: tests/unit/test_interpolate.py.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from bcgprof.analysis.predict.fold import ALLOC, find_period, free_index
from bcgprof.analysis.predict.lists import PredictionError, predict_buckets
from bcgprof.analysis.predict.prediction import prediction_json
from bcgprof.analysis.predict.replay import Replayer
from bcgprof.analysis.predict.sources import BUCKET_BITS, FIRST_INTERPOLATED, MODE_BITS
from bcgprof.report import read_report
from tests.interpolation_oracle import interpolated_ops

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def _traced(name: str) -> Path:
    path = REPORTS / name
    if not (path / "traces-per-bucket.csv.gz").exists():
        pytest.skip(f"{name} is not in this checkout")
    return path


@pytest.mark.parametrize(
    "name,left_out",
    [
        ("llama-3.1-8b-h200-traced", [15360, 9728, 2304, 832, 144, 12]),
        ("gpt-oss-20b-h200-traced", [14848, 6144, 640, 28]),
    ],
)
def test_a_profiled_bucket_left_out_and_interpolated_gives_the_profiles_rows_back(name, left_out):
    path = _traced(name)
    whole = Replayer.load(path, ["per-bucket", "shared"])
    for mode in ("per-bucket", "shared"):
        assert whole.bucket_sources.has(mode)
        order = whole.bucket_sources.order[mode]
        truth = whole.replay(mode, order).pool_bytes
        for bucket in left_out:
            again = Replayer(whole.bucket_sources.traces)
            assert again.bucket_sources.has(mode)
            del again.bucket_sources.ops[mode][bucket]
            replay = again.replay(mode, order)
            assert again.bucket_sources.interpolated(mode, bucket) is not None
            assert replay.pool_bytes == truth, (mode, bucket)


def test_an_interpolated_bucket_gives_the_events_drawn_one_by_one(committed_profiles):
    """An interpolated bucket's events, made from whole arrays as columns, are the tuples that
    drawing each event on its own gives, with the same free index and repeating region."""
    _, p = committed_profiles(_traced("llama-3.1-8b-h200-third"))
    sources = p.replayer.bucket_sources
    folded = 0
    for mode in ("per-bucket", "shared"):
        assert sources.has(mode)
        profiled = sources.profiled[mode]
        between = [(lo + hi) // 2 for lo, hi in pairwise(profiled) if hi - lo > 1]
        for bucket in between[::4]:
            sources.sources(mode, [bucket])  # drawn from its neighbours
            made = sources.ops[mode][bucket]
            pattern, _ = sources._pattern(mode, *made.between)
            number = (FIRST_INTERPOLATED | sources.number(mode)) << BUCKET_BITS
            one_by_one = interpolated_ops(bucket, pattern, (number | bucket) << MODE_BITS)
            frees = free_index(one_by_one)
            assert made.fold == find_period(one_by_one, frees), (mode, bucket)
            assert made.frees == frees and made.ops == one_by_one, (mode, bucket)
            assert made.streams() == list(dict.fromkeys(o[2] for o in one_by_one if o[0] == ALLOC))
            folded += made.fold is not None
    assert folded  # the folded replay's case is among them


# Lists captured on the H200, predicted from other traced lists of the same model that lack some of
# their buckets (subset20 holds 20 random buckets, third every third one of the 74).
CROSS = [
    ("llama-3.1-8b-h200-third", "llama-3.1-8b-h200-range512"),
    ("llama-3.1-8b-h200-third", "llama-3.1-8b-h200-subset20"),
    ("llama-3.1-8b-h200-subset20", "llama-3.1-8b-h200-tophalf"),
]


@pytest.mark.parametrize("source,target", CROSS)
def test_lists_captured_on_the_h200_are_predicted_from_sparser_traced_lists(
    source, target, committed_profiles
):
    (profile, p), measured = committed_profiles(_traced(source)), read_report(_traced(target))
    wanted = measured.run.buckets
    assert set(wanted) - set(profile.run.buckets)  # something to interpolate
    pred = predict_buckets(profile, wanted, profile=p)
    for m in pred.modes:
        rows = sorted((r for r in measured.buckets if r.mode == m.mode), key=lambda r: r.order)
        total = next(s.device_used_bytes for s in measured.summary if s.mode == m.mode)
        assert m.low_bytes <= total <= m.high_bytes, (m.mode, m.low_bytes, total, m.high_bytes)
        if m.other_placement_pool_bytes is None:
            assert [r.pool_bytes for r in m.buckets] == [r.pool_bytes for r in rows], m.mode
        else:  # the driver's placement decided a tie: the measured pool is one of the two replays
            assert rows[-1].pool_bytes in (m.pool_bytes, m.other_placement_pool_bytes), m.mode
    assert any(m.other_placement_pool_bytes is not None for m in pred.modes) == (
        "subset20" in source
    )


@pytest.mark.parametrize("source,target", CROSS)
def test_the_other_placement_is_replayed_only_when_a_segment_had_no_recorded_address(
    source, target, monkeypatch, committed_profiles
):
    """Placement decides only where a segment lacks a usable recorded address; a replay that made
    none up is its own other placement, so the second replay is skipped and the prediction is the
    same."""
    profile, p = committed_profiles(_traced(source))
    wanted = read_report(_traced(target)).run.buckets
    both = predict_buckets(profile, wanted, profile=p)
    replays = {m.mode: p.replayer.replay(m.mode, wanted) for m in both.modes}
    made_up = {mode: r.made_up for mode, r in replays.items()}
    forced = {}
    for m in both.modes:  # the second placement, replayed whether or not it is needed
        other = p.replayer.other_placement().replay(m.mode, wanted)
        forced[m.mode] = (
            other.pool_bytes[-1] if other.pool_bytes != replays[m.mode].pool_bytes else None
        )
        assert m.other_placement_pool_bytes == forced[m.mode], m.mode
        if not made_up[m.mode]:
            assert forced[m.mode] is None, m.mode
    calls = []
    real = type(p.replayer).other_placement
    monkeypatch.setattr(
        type(p.replayer), "other_placement", lambda self: calls.append(1) or real(self)
    )
    again = predict_buckets(profile, wanted, profile=p)
    assert len(calls) == sum(1 for v in made_up.values() if v)
    assert prediction_json(again) == prediction_json(both)


def test_a_bucket_between_neighbours_whose_kernels_differ_is_refused(shared_profiles):
    # its captures change shape between 1024 and 1280 tokens
    path = _traced("gpt-oss-20b-h200-traced")
    with pytest.raises(
        PredictionError,
        match="bucket 1100 cannot be interpolated: the captures of 1024 and 1280 "
        "differ in more than their sizes",
    ):
        predict_buckets(read_report(path), [16384, 1100], ["per-bucket"])
