"""The free memory a capture needs (bcgprof.analysis.predict.needs_free): the rule on synthetic
buckets and the warm-up's growth read from a trace (the committed H200 captures that the rule must
reproduce: tests/regression/test_needs_free.py)."""

from __future__ import annotations

from bcgprof.analysis.predict.needs_free import (
    CAPTURE,
    WARMUP,
    BucketNeed,
    NeedsFree,
    WarmupGrowth,
    prewarm_leftover,
    traced_needs,
    warmup_growth,
)
from bcgprof.report.traces import Trace, TraceRow

MIB = 1 << 20


def _need(bucket, order, kept, cached, warm_floor=None):
    return BucketNeed(
        bucket,
        order,
        kept * MIB,
        (cached + kept) * MIB,
        warmup_bytes=cached * MIB,
        warmup_floor_bytes=None if warm_floor is None else warm_floor * MIB,
    )


def _room():
    # kept 100, 10, 50; the second bucket's peak is the highest above what came before
    return NeedsFree(
        "per-bucket",
        "test",
        [_need(300, 0, 100, 150, 120), _need(200, 1, 10, 250, 180), _need(100, 2, 50, 100, 60)],
    )


def test_needs_free_is_the_highest_peak_above_what_earlier_buckets_kept():
    h = _room()
    # before each bucket: 0, 100, 110 kept; peaks 250, 100 + 260, 110 + 150
    assert (
        h.needs_free_bytes == 360 * MIB and h.tightest.bucket == 200 and h.keeps_bytes == 160 * MIB
    )


def test_with_enough_free_every_bucket_fits_and_one_byte_less_fails_at_the_tightest():
    h = _room()
    assert h.check(360 * MIB).fits and h.first_oom is None
    h.check(360 * MIB - 1)
    assert not h.fits and h.first_oom.bucket == 200 and h.first_oom_free_bytes == 260 * MIB - 1


def test_a_bucket_whose_warm_up_fits_fails_in_its_capture_for_certain():
    # 255 MiB before bucket 200: its warm-up caches 250, the capture needs 10 more
    h = _room().check(355 * MIB)
    assert (h.first_oom.bucket, h.first_oom_phase, h.first_oom_certain) == (200, CAPTURE, True)


def test_a_warm_up_short_of_its_cache_may_pass_unless_below_its_allocated_peak():
    # 200 before bucket 200: below its 250 of cache, above its 180 allocated peak
    h = _room().check(300 * MIB)
    assert (h.first_oom.bucket, h.first_oom_phase, h.first_oom_certain) == (200, WARMUP, False)
    h.check(279 * MIB)  # 179 before bucket 200: under its allocated peak
    assert (h.first_oom.bucket, h.first_oom_phase, h.first_oom_certain) == (200, WARMUP, True)
    # the first bucket is short of its 150 of cache, above its allocated peak of 120
    h.check(140 * MIB)
    assert (h.first_oom.bucket, h.first_oom_phase, h.first_oom_certain) == (300, WARMUP, False)


def test_an_upper_bound_never_calls_a_failure_certain():
    rows = [type("Row", (), {"bucket": 100, "order": 0, "device_used_delta_bytes": 10 * MIB})()]
    h = traced_needs(
        "per-bucket", rows, {100: WarmupGrowth(50 * MIB, 40 * MIB)}, {}, upside=20 * MIB
    )
    assert h.needs_free_bytes == 80 * MIB and h.upper_bound
    assert h.check(75 * MIB).first_oom_phase == CAPTURE and not h.first_oom_certain


def test_within_the_band_of_a_predicted_need_no_outcome_is_certain():
    h = _room()
    h.band_bytes = 5 * MIB  # the tightest bucket needs 360 before it, give or take 5
    h.check(358 * MIB)  # 2 short
    assert (h.first_oom.bucket, h.first_oom_phase, h.first_oom_certain) == (200, CAPTURE, False)
    h.check(352 * MIB)  # 8 short: beyond the band
    assert (h.first_oom.bucket, h.first_oom_phase, h.first_oom_certain) == (200, CAPTURE, True)
    h.check(277 * MIB)  # 177 before bucket 200: under its allocated peak (180), but within the band
    assert (h.first_oom_phase, h.first_oom_certain) == (WARMUP, False)
    h.check(270 * MIB)
    assert (h.first_oom_phase, h.first_oom_certain) == (WARMUP, True)
    assert h.check(363 * MIB).fits and h.fits_within_band
    assert h.check(366 * MIB).fits and not h.fits_within_band
    assert not _room().check(361 * MIB).fits_within_band  # no band: a fit is a fit


def _row(bucket, phase, action, size, pool="other"):
    return TraceRow(
        bucket, phase, pool, action, 1, size, 0, None, None, 1 if "segment" in action else None
    )


def test_warm_up_growth_counts_the_segments_after_the_emptied_cache():
    rows = [
        _row(8, "warmup", "segment_exists", 50 * MIB),
        _row(8, "warmup", "segment_alloc", 20 * MIB),
        _row(8, "warmup", "segment_alloc", 6 * MIB),  # pre-warm
        _row(8, "warmup", "segment_free", 20 * MIB),  # empty_cache: 6 MiB still holds a live block
        _row(8, "warmup", "segment_alloc", 30 * MIB),
        _row(8, "warmup", "peak", 25 * MIB),
        _row(8, "capture", "segment_alloc", 8 * MIB, pool="graph"),
        _row(4, "warmup", "segment_free", 30 * MIB),
        _row(4, "warmup", "segment_alloc", 12 * MIB),
        _row(4, "warmup", "segment_alloc", 2 * MIB),
        _row(4, "warmup", "peak", 9 * MIB),
    ]
    trace = Trace(mode="per-bucket", buckets=[8, 4], rows=rows)
    assert warmup_growth(trace) == {
        8: WarmupGrowth(30 * MIB, 25 * MIB),
        4: WarmupGrowth(14 * MIB, 9 * MIB),
    }
    assert prewarm_leftover(trace) == 6 * MIB
