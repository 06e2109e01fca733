"""The free device memory a capture needs ("needs free"), bucket by bucket, and the first bucket
that runs out: the one computation of it, measured or predicted (:func:`needs_free_bytes`).

A capture needs more free memory than it keeps. Bucket by bucket (:mod:`bcgprof.measure.capture`):

1. the ordinary cache is emptied (``torch.cuda.empty_cache``): the bucket starts from what earlier
   buckets kept (graph pool, executables) and the ordinary pools' live blocks;
2. the eager warm-up grows the ordinary pools by ``W`` bytes of segments and leaves them cached,
   since nothing empties the cache between warm-up and capture;
3. the capture allocates in the graph pool, which grows by ``G``, and instantiating its graphs
   takes ``X`` bytes of driver memory (the executables, which NVML sees and torch does not).

While a capture is underway the caching allocator cannot hand the warm-up's cached blocks back to
the driver: in PyTorch's ``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator::malloc``,
torch 2.4 to 2.11), a failed ``cudaMalloc`` first frees cached blocks of the pool being allocated
from (``release_available_cached_blocks``: the graph's private pool during a capture), and frees
every other cached block (``release_cached_blocks``) only when ``captures_underway`` is empty. So
the warm-up's cache and the capture's growth meet at the bucket's peak: it needs
``W + G + X`` free above the level it started from, and keeps ``kept`` (``G + X`` and any torch
memory outside the pool, which the warm-up allocated and ``W`` already counts). The free memory
before bucket ``k`` is the free memory before the first bucket less what buckets ``1..k-1`` kept,
so a list needs free the most, over its buckets, of that bucket's need on top of what the earlier
buckets kept (:func:`needs_free_bytes`; every figure of it, on screen or in JSON, is this one).

Given ``F`` free when the first bucket's warm-up begins, the first bucket ``k`` whose free
memory is below its need cannot capture as profiled. What happens there:

* free >= ``W``: the warm-up runs as profiled, and the capture cannot get ``G + X`` more: it
  fails in the capture (certain);
* free < ``W``: the warm-up itself meets a failed ``cudaMalloc``, and with no capture underway
  the allocator frees its cached blocks and retries. Below the warm-up's allocated peak ``P`` it
  fails there (certain); between ``P`` and ``W`` the warm-up may finish with less cached, and
  whether the capture then fits depends on block events the trace does not keep (not certain).

``W`` and ``P`` per bucket come from the allocator traces (the ordinary pools' segment rows and
peak row of the bucket's warm-up window; exact), or, for a report without traces, ``W`` from the
measured rows (each bucket's sampled NVML peak less what it kept). A bucket's warm-up starts from
an emptied cache, so ``W`` is the bucket's own wherever it stands in a list, as long as the list
starts from the same largest bucket: the pre-warm (the model's first forward, at the largest
bucket) leaves segments that still hold a live block, and later warm-ups reuse their free space
(:func:`prewarm_leftover`). A list with a smaller largest bucket may have each warm-up cache up
to that leftover more, which the prediction adds, as an upper bound, and says so.

Invariant: a failure is called certain only beyond the need's band: in the capture when the need is
not an upper bound, in the warm-up only below its allocated peak from the trace. Cost: one pass over
each mode's bucket rows, plus one over its trace's warm-up windows when there is a trace. The checks
against captures, with and without memory held by another process, are in docs/evidence-predict.md.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from bcgprof.vocab import BucketStatus

if TYPE_CHECKING:
    from bcgprof.report.schema import BucketRecord
    from bcgprof.report.traces import Trace

CAPTURE = "capture"
WARMUP = "warm-up"


@dataclass(frozen=True)
class WarmupGrowth:
    """A bucket's eager warm-up, from its trace window: the ordinary pools' segment growth (cached
    through the capture) and their allocated-bytes peak (the least a warm-up under pressure
    needs)."""

    reserved_bytes: int
    allocated_peak_bytes: Optional[int]


def warmup_growth(trace: Trace) -> dict[int, WarmupGrowth]:
    """Per bucket: the ordinary pools' growth during its warm-up.

    A warm-up window opens with the frees of the emptied cache (the previous bucket's warm-up
    blocks; for the first bucket, the pre-warm's), so the growth is the segments allocated after
    the window's last segment free. A profile is captured without memory pressure, so no free
    happens inside the warm-up itself."""
    # gzip and friends: off show's start-up
    from bcgprof.report.traces import Action, TracePhase, TracePool

    grown: dict[int, int] = {}
    peak: dict[int, int] = {}
    for row in trace.rows:
        if row.pool != TracePool.OTHER or row.phase != TracePhase.WARMUP:
            continue
        if row.action == Action.SEGMENT_FREE:
            grown[row.bucket] = 0
        elif row.action == Action.SEGMENT_ALLOC:
            grown[row.bucket] = grown.get(row.bucket, 0) + row.size
        elif row.action == Action.PEAK:
            peak[row.bucket] = row.size
    return {b: WarmupGrowth(grown.get(b, 0), peak.get(b)) for b in trace.buckets}


def prewarm_leftover(trace: Trace) -> int:
    """Ordinary segments the first bucket's emptied cache kept: the pre-warm's segments that still
    hold a live block. Their free space serves later warm-ups, and it scales with the pre-warm's
    bucket, so a list whose largest bucket is smaller than the profile's may need up to this much
    more in every warm-up."""
    from bcgprof.report.traces import Action, TracePhase, TracePool

    first = trace.buckets[0] if trace.buckets else None
    allocated = freed = pending = 0
    for row in trace.rows:
        if row.bucket != first or row.pool != TracePool.OTHER or row.phase != TracePhase.WARMUP:
            continue
        if row.action == Action.SEGMENT_ALLOC:
            pending += row.size
        elif row.action == Action.SEGMENT_FREE:
            allocated, pending = allocated + pending, 0
            freed += row.size
    return max(0, allocated - freed)


@dataclass
class BucketNeed:
    bucket: int
    order: int
    kept_bytes: int  # device used after the bucket, above the level before it
    # the bucket's peak above the level before it: the warm-up's cache plus what it keeps
    need_bytes: int
    warmup_bytes: int  # W: what the warm-up caches (ordinary pools' growth)
    # P: the warm-up's allocated peak, when the trace has it
    warmup_floor_bytes: Optional[int] = None


def free_before(needs: Sequence[BucketNeed]) -> list[int]:
    """What the buckets before each one kept: the free memory before bucket ``k`` is the free memory
    before the first less this."""
    out, kept = [], 0
    for b in needs:
        out.append(kept)
        kept += b.kept_bytes
    return out


def peaks(needs: Sequence[BucketNeed]) -> list[int]:
    """Each bucket's need on top of what the earlier buckets kept (capture order)."""
    return [before + b.need_bytes for before, b in zip(free_before(needs), needs, strict=True)]


def needs_free_bytes(needs: Sequence[BucketNeed]) -> int:
    """The least free memory, when the first bucket's warm-up begins, with which every bucket
    captures as profiled: the highest of :func:`peaks` (0 for no bucket)."""
    return max(peaks(needs), default=0)


def bucket_need_bytes(r: BucketRecord) -> int:
    """One bucket's measured need above the level before it: its sampled NVML peak, or what it kept
    when the sampler saw less."""
    assert r.device_peak_delta_bytes is not None
    return max(r.device_peak_delta_bytes, r.device_used_delta_bytes)


def warmup_cache_bytes(growth: WarmupGrowth, outside: int) -> int:
    """What a bucket's warm-up caches beyond what the bucket keeps: its ordinary pools' growth less
    the torch memory outside the graph pool that the bucket keeps (counted once, as kept)."""
    return max(0, growth.reserved_bytes - outside)


@dataclass
class NeedsFree:
    """What one mode's list needs free when its first bucket's warm-up begins, and what it keeps."""

    mode: str
    source: str  # where the warm-up figures come from
    buckets: list[BucketNeed] = field(default_factory=list)
    free_bytes: Optional[int] = None  # the free memory it was checked against (--free)
    first_oom: Optional[BucketNeed] = None
    first_oom_phase: Optional[str] = None  # capture | warm-up
    first_oom_certain: bool = False
    first_oom_free_bytes: Optional[int] = None  # free before that bucket
    # the needs are upper bounds (a list whose largest bucket is not the profile's)
    upper_bound: bool = False
    # how far a predicted need may be off either way (layer predictions; 0: exact or bound)
    band_bytes: int = 0
    # with --free, all buckets captured: whether bcgprof's check fits (None: may)
    verify_fits: Optional[bool] = None

    @property
    def keeps_bytes(self) -> int:
        return sum(b.kept_bytes for b in self.buckets)

    @property
    def needs_free_bytes(self) -> int:
        """The least free memory with which every bucket captures as profiled
        (:func:`needs_free_bytes`)."""
        return needs_free_bytes(self.buckets)

    @property
    def tightest(self) -> Optional[BucketNeed]:
        """The bucket where the need peaks (the first, on a tie)."""
        if not self.buckets:
            return None
        totals = peaks(self.buckets)
        return self.buckets[totals.index(max(totals))]

    @property
    def needs_free_with_verify_bytes(self) -> int:
        """What `bcgprof capture` itself needs with its default --verify: after the last bucket it
        runs an eager forward at the largest bucket (the first), whose cache is that bucket's
        warm-up's, on top of all that the list keeps. An engine has no such step; ``--verify none``
        skips it."""
        first = self.buckets[0] if self.buckets else None
        return max(self.needs_free_bytes, self.keeps_bytes + (first.warmup_bytes if first else 0))

    @property
    def fits(self) -> Optional[bool]:
        return None if self.free_bytes is None else self.first_oom is None

    @property
    def fits_within_band(self) -> bool:
        """It fits, by less than the band of a predicted need: it may still run out."""
        return (
            bool(self.fits)
            and self.free_bytes is not None
            and self.free_bytes - self.needs_free_bytes < self.band_bytes
        )

    def check(self, free_bytes: int) -> NeedsFree:
        """Set the first bucket that cannot capture as profiled with ``free_bytes`` free, and where
        it fails."""
        self.free_bytes = free_bytes
        self.first_oom = self.first_oom_phase = self.first_oom_free_bytes = None
        self.first_oom_certain = False
        for before, b in zip(free_before(self.buckets), self.buckets, strict=True):
            free = free_bytes - before
            if free >= b.need_bytes:
                continue
            self.first_oom, self.first_oom_free_bytes = b, free
            # within the band of a predicted need, the outcome is not certain either way
            if free >= b.warmup_bytes:
                self.first_oom_phase = CAPTURE
                self.first_oom_certain = (
                    not self.upper_bound and free < b.need_bytes - self.band_bytes
                )
            else:
                self.first_oom_phase = WARMUP
                self.first_oom_certain = (
                    b.warmup_floor_bytes is not None
                    and free < b.warmup_floor_bytes - self.band_bytes
                )
            break
        self.verify_fits = None
        if self.first_oom is None and self.buckets:
            first, left = self.buckets[0], free_bytes - self.keeps_bytes
            if left >= first.warmup_bytes + self.band_bytes:
                self.verify_fits = True
            elif (
                first.warmup_floor_bytes is not None
                and left < first.warmup_floor_bytes - self.band_bytes
            ):
                self.verify_fits = False
        return self


MEASURED = "measured: each bucket's NVML peak (sampled) and kept bytes"
TRACED = "the warm-up's cached segments from the allocator traces; kept bytes as predicted"


def measured_needs(mode: str, rows: Sequence) -> Optional[NeedsFree]:
    """From one mode's bucket rows (capture order, all ``ok``): each bucket's measured peak above
    the level before it (``device_peak_delta_bytes``) and what it kept. None when a row lacks the
    peak (a report written before it was recorded) or a bucket failed."""
    if not rows or any(
        r.status != BucketStatus.OK or r.device_peak_delta_bytes is None for r in rows
    ):
        return None
    needs = []
    for r in rows:
        kept = r.device_used_delta_bytes
        need = bucket_need_bytes(r)
        # reports written before the ledger lack the column; it is, by its definition, this
        # difference
        outside = (
            r.outside_pool_delta_bytes
            if r.outside_pool_delta_bytes is not None
            else r.torch_reserved_delta_bytes - r.pool_delta_bytes
        )
        # the allocated peak (warm-up and capture) is the least a warm-up under pressure needs
        needs.append(
            BucketNeed(
                r.bucket,
                r.order,
                kept,
                need,
                warmup_bytes=need - kept + outside,
                warmup_floor_bytes=r.peak_transient_bytes,
            )
        )
    return NeedsFree(mode, MEASURED, needs)


def measured_needs_free_bytes(rows: Sequence[BucketRecord]) -> Optional[int]:
    """The free memory one mode's capture needed when its first bucket's warm-up began, from its
    rows (any order): :func:`needs_free_bytes` of :func:`measured_needs`. None when a bucket failed
    or a row lacks the peak (a report written before it was recorded)."""
    h = measured_needs("", sorted(rows, key=lambda r: r.order))
    return h.needs_free_bytes if h is not None else None


def layered_needs(
    mode: str, predicted: Sequence, deep_rows: Sequence, band_bytes: int, source: str
) -> Optional[NeedsFree]:
    """At another layer count: each bucket's measured peak above what it kept, from the deepest
    few-layer capture's rows (``deep_rows``), on top of what the prediction says it keeps
    (``predicted``: rows with
    ``device_used_delta_bytes``, same buckets and order). The part above what a bucket keeps is its
    eager warm-up's cache, one layer's working set at a time, so it does not grow with depth; what
    the buckets keep (executables) does. ``band_bytes``: how far the figure may be off either way
    (calibrated against deeper captures,
    :func:`bcgprof.analysis.predict.bands.layer_needs_free_band`)."""
    h = measured_needs(mode, deep_rows)
    if h is None or [b.bucket for b in h.buckets] != [r.bucket for r in predicted]:
        return None
    for b, r in zip(h.buckets, predicted, strict=True):
        above = b.need_bytes - b.kept_bytes
        b.kept_bytes = r.device_used_delta_bytes
        b.need_bytes = b.kept_bytes + above
    h.source, h.band_bytes = source, band_bytes
    return h


def traced_needs(
    mode: str,
    rows: Sequence,
    growth: dict[int, WarmupGrowth],
    outside: dict[int, int],
    upside: int = 0,
) -> NeedsFree:
    """From predicted rows (``bucket``, ``order``, ``device_used_delta_bytes``) and each bucket's
    warm-up growth; ``outside``: each bucket's torch memory outside the pool, which its warm-up's
    growth counts and which it keeps (so it is not counted twice). ``upside``: bytes every warm-up
    may cache beyond the profile's (:func:`prewarm_leftover`, for a list with a smaller largest
    bucket): added to each need, so that the figure is an upper bound, and no failure is then called
    certain."""
    needs = []
    for r in rows:
        g = growth[r.bucket]
        kept = r.device_used_delta_bytes
        cached = warmup_cache_bytes(g, outside.get(r.bucket, 0)) + upside
        needs.append(
            BucketNeed(
                r.bucket,
                r.order,
                kept,
                cached + kept,
                warmup_bytes=g.reserved_bytes + upside,
                warmup_floor_bytes=g.allocated_peak_bytes,
            )
        )
    h = NeedsFree(
        mode,
        TRACED
        if not upside
        else f"{TRACED}; an upper bound: {upside / 2**20:.0f} MiB more per "
        "warm-up, what the profile's pre-warm left for later warm-ups",
        needs,
    )
    h.upper_bound = bool(upside)
    return h


def needs_free_json(h: Optional[NeedsFree]) -> dict:
    """The needs-free fields of a mode's JSON entry (nulls when unknown)."""
    if h is None:
        return {
            "needs_free_bytes": None,
            "keeps_bytes": None,
            "tightest_bucket": None,
            "headroom_source": None,
            "needs_free_upper_bound": None,
            "needs_free_low_bytes": None,
            "needs_free_high_bytes": None,
            "free_bytes": None,
            "fits": None,
            "first_oom_bucket": None,
            "first_oom_order": None,
            "first_oom_phase": None,
            "first_oom_certain": None,
            "first_oom_free_bytes": None,
            "needs_free_with_verify_bytes": None,
            "verify_fits": None,
        }
    t = h.tightest
    return {
        "needs_free_bytes": h.needs_free_bytes,
        "keeps_bytes": h.keeps_bytes,
        "tightest_bucket": t.bucket if t else None,
        "headroom_source": h.source,
        "needs_free_upper_bound": h.upper_bound,
        "needs_free_low_bytes": h.needs_free_bytes - h.band_bytes,
        "needs_free_high_bytes": h.needs_free_bytes + h.band_bytes,
        "free_bytes": h.free_bytes,
        "fits": h.fits,
        "first_oom_bucket": h.first_oom.bucket if h.first_oom else None,
        "first_oom_order": h.first_oom.order if h.first_oom else None,
        "first_oom_phase": h.first_oom_phase,
        "first_oom_certain": h.first_oom_certain if h.first_oom else None,
        "first_oom_free_bytes": h.first_oom_free_bytes,
        "needs_free_with_verify_bytes": h.needs_free_with_verify_bytes,
        "verify_fits": h.verify_fits if h.free_bytes is not None and h.first_oom is None else None,
    }
