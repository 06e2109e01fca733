"""How a prediction's work grows when most of the list's buckets were not profiled, counted, not
timed: every such bucket looks up its profiled neighbours (its events, output, executables and row
come from them), and a lookup that scans the profile makes the work grow with (buckets predicted) x
(buckets profiled): 57 s for one mode of a 4,096-bucket list before the lookups bisected, 8 s after.
Twice the buckets, each gap looked up, must cost at most GROWTH times the lines run."""

from __future__ import annotations

import random
import sys

from bcgprof.analysis.predict.interpolate import neighbours
from bcgprof.analysis.predict.lists import (
    BucketProfile,
    _executables,
    _output,
    _row,
    bucket_profile,
    predict_buckets,
)
from bcgprof.report import BucketRecord

GROWTH = 2.4  # linear work plus sorting: twice the buckets, a little over twice the lines
SIZES = (256, 512)
STEP = 64


def _profile(n: int) -> BucketProfile:
    """A profile of ``n`` buckets (rows, outputs, executables; no traces: the lookups do not
    replay)."""
    buckets = [STEP * (i + 1) for i in range(n)]
    rows = {
        b: BucketRecord(
            mode="per-bucket", bucket=b, order=n - 1 - i, status="ok", retained_output_bytes=b * 8
        )
        for i, b in enumerate(buckets)
    }
    return BucketProfile(
        buckets[-1],
        {b: b * 8 for b in buckets},
        {"per-bucket": rows},
        replayer=None,
        executables={"per-bucket": {b: 2 << 20 for b in buckets[:-1]}},
    )


def _between(p: BucketProfile) -> list[int]:
    """A bucket in every gap of the profile: each one looked up between its neighbours."""
    return [b + STEP // 2 for b in p.profiled["per-bucket"][:-1]]


def _lines(work) -> int:
    """Lines of Python run while ``work()`` runs (loop bodies and comprehensions included)."""
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def _look_up(p: BucketProfile) -> None:
    for b in _between(p):
        _row(p, "per-bucket", b), _output(p, b), _executables(p, "per-bucket", b)


def test_twice_the_buckets_not_profiled_at_most_a_little_over_twice_the_lookup_lines():
    small, large = (_lines(lambda p=_profile(n): _look_up(p)) for n in SIZES)
    assert large <= GROWTH * small, f"{small} lines for {SIZES[0]} buckets, {large} for {SIZES[1]}"


def test_a_scan_of_the_profile_per_bucket_would_be_caught():
    """The counter sees a lookup that scans every profiled bucket for each bucket not profiled."""

    def scanning(p):
        _look_up(p)
        for b in _between(p):
            [q for q in p.rows["per-bucket"] if q < b]

    small, large = (_lines(lambda p=_profile(n): scanning(p)) for n in SIZES)
    assert large > GROWTH * small


def test_a_list_of_buckets_not_profiled_is_predicted_from_their_neighbours(tmp_path):
    """The lookups in use: every gap of a traced profile interpolated; each output lies on the line
    between its neighbours' (the synthetic stack's output is tokens x hidden x 4 bytes)."""
    from traced_profile import HIDDEN, write_profile

    report = write_profile(tmp_path / "p", [STEP * (i + 1) for i in range(8)], ("per-bucket",))
    p = bucket_profile(report)
    wanted = _between(p) + [p.largest]
    rows = predict_buckets(report, wanted, ["per-bucket"], profile=p).mode("per-bucket").buckets
    assert [r.bucket for r in rows] == sorted(wanted, reverse=True)
    assert all(r.retained_output_bytes == r.bucket * HIDDEN * 4 for r in rows)


def test_neighbours_by_bisection_are_the_nearest_profiled_buckets_on_either_side():
    rng = random.Random(7)
    for _ in range(300):
        profiled = sorted(rng.sample(range(1, 400), rng.randint(1, 12)))
        bucket = rng.randint(0, 401)
        below, above = [b for b in profiled if b < bucket], [b for b in profiled if b > bucket]
        assert neighbours(profiled, bucket) == (
            (max(below), min(above)) if below and above else None
        )


def test_a_bucket_not_profiled_takes_the_row_of_the_nearest_later_bucket_the_smaller_on_a_tie():
    p = _profile(12)
    largest = p.largest
    for bucket in range(1, largest + STEP):
        if bucket in p.rows["per-bucket"]:
            continue
        later = [b for b in p.rows["per-bucket"] if b != largest]
        nearest = min(later, key=lambda b: (abs(b - bucket), b))
        assert _row(p, "per-bucket", bucket).bucket == nearest, bucket
