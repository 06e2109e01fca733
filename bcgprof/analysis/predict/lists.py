"""`bcgprof predict --buckets`: a capture's cost for another bucket list drawn from one traced
profile, and a profile's own list with the free memory it needs.

:func:`predict_buckets` predicts another bucket list drawn from one profile: the graph pool by
replaying the profile's allocator traces through a model of PyTorch's caching allocator
(:mod:`bcgprof.analysis.predict.replay`), exact for every list of profiled buckets; each bucket's
torch memory outside the pool and graphs as its measured row; each later bucket's executables read
from the mode's NVML staircase (:mod:`bcgprof.analysis.predict.executables`), the first's as the
profile's first row. The band comes from measured residuals of held-out lists
(:mod:`bcgprof.analysis.predict.bands`). A report without traces is refused. A bucket inside the
profiled range but not profiled is interpolated (:mod:`bcgprof.analysis.predict.interpolate`,
labelled); one outside it is refused. Where a new segment's address decides a best-fit tie, the list
is replayed with such segments placed above and below the others, and the band spans both.

Invariant: no mode total below zero, no band without its point. Cost: one replay per mode, two
where a segment had no recorded address (a replay's cost: :mod:`bcgprof.analysis.predict.replay`);
a prediction made on its own keeps its replays under the cache
(:mod:`bcgprof.analysis.predict.kept_replays`), so the next command on the same traces and list
looks them up.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from bcgprof.analysis.predict.bands import Band, ListBands
from bcgprof.analysis.predict.executables import later_executables
from bcgprof.analysis.predict.interpolate import line_size, neighbours
from bcgprof.analysis.predict.needs_free import (
    NeedsFree,
    measured_needs,
    traced_needs,
)
from bcgprof.analysis.predict.prediction import (
    MIB,
    NO_PEAKS,
    BucketPrediction,
    ModePrediction,
    Prediction,
    check_usable,
    mode_totals,
    report_rows,
    round_up,
    too_wide_notes,
)
from bcgprof.analysis.predict.recorded import as_profile, untraced
from bcgprof.analysis.predict.side_by_side import check_traces
from bcgprof.errors import PredictionError
from bcgprof.options import mode_index
from bcgprof.report import BucketRecord, Report
from bcgprof.report.traces import trace_files
from bcgprof.vocab import Mode, Order

if TYPE_CHECKING:  # the replay (and numpy) is imported where a list is replayed
    from bcgprof.analysis.predict.replay import Replayer

MAX_LISTED = 8  # interpolated buckets named in a note

NO_TRACES = (
    "{path} has no allocator traces (captured before they were recorded); re-capture with this "
    "bcgprof "
    "to predict other bucket lists"
)
POOL_REPLAYED = "pool: replayed exactly from the allocator traces"


@dataclass
class BucketProfile:
    """What one report says about each bucket: its measured rows, and its allocator traces to
    replay."""

    largest: int
    output: dict[int, int]  # bucket -> output bytes
    rows: dict[str, dict[int, BucketRecord]]  # mode -> bucket -> row
    replayer: Replayer
    # mode -> later bucket -> bytes
    executables: dict[str, dict[int, int]] = field(default_factory=dict)
    # mode -> the evidence of its list bands
    bands: dict[str, ListBands] = field(default_factory=dict)
    # ascending, for bisection: a list of thousands of buckets not profiled looks each one's
    # neighbours up
    profiled: dict[str, list[int]] = field(init=False, repr=False)  # mode -> its rows' buckets
    outputs: list[int] = field(init=False, repr=False)  # the buckets with an output size

    def __post_init__(self):
        self.profiled = {mode: sorted(rows) for mode, rows in self.rows.items()}
        self.outputs = sorted(self.output)


def bucket_profile(report: Report) -> BucketProfile:
    """The report's rows and traces, read once for many list predictions. Refuses a report without
    traces. A recording is its traced groups (:func:`~bcgprof.analysis.predict.recorded.
    as_profile`)."""
    from bcgprof.analysis.predict.replay import Replayer

    report = as_profile(report)
    check_usable(report)
    rows = {m: {r.bucket: r for r in report_rows(report, m)} for m in report.modes()}
    measured = {m: [(r.bucket, r.pool_bytes) for r in report_rows(report, m)] for m in rows}
    replayer = Replayer.load(report.path, list(rows), expected=measured)
    if replayer is None:
        raise PredictionError(NO_TRACES.format(path=report.path))
    largest = max(report.run.buckets)
    per_bucket = rows.get(Mode.PER_BUCKET, {})
    # without per-bucket rows: the largest bucket's output, in proportion (an output is rows x
    # hidden)
    top = max(
        (rs[largest].retained_output_bytes for rs in rows.values() if largest in rs), default=0
    )
    output = {
        b: per_bucket[b].retained_output_bytes if b in per_bucket else top * b // largest
        for b in report.run.buckets
    }
    executables = {m: later_executables(report_rows(report, m)) for m in rows}
    bands = {m: ListBands(report.run, m, profile=_profile_name(report)) for m in rows}
    return BucketProfile(largest, output, rows, replayer, executables, bands)


def _profile_name(report: Report) -> str:
    """The report as the calibration names profiles (``reports/NAME``)."""
    return f"reports/{report.path.name}" if report.path else ""


def predict_buckets(
    report: Report,
    buckets: Sequence[int],
    modes: Optional[Sequence[str]] = None,
    *,
    profile: Optional[BucketProfile] = None,
    free: Optional[int] = None,
) -> Prediction:
    """Each mode's cost for another bucket list drawn from the profiled buckets: the pool replayed
    from the allocator traces (:mod:`bcgprof.analysis.predict.replay`), torch memory outside the
    pool and graph executables from each bucket's measured row. ``profile``: the report's
    :func:`bucket_profile`, when the caller predicts many lists from one report. Each mode's
    :class:`~bcgprof.analysis.predict.needs_free.NeedsFree` says what free memory the list needs;
    ``free``: check it against that many bytes free when the first bucket's warm-up begins."""
    from bcgprof.analysis.predict.replay import ReplayError

    left_out = untraced(report)
    report = as_profile(report)
    p = profile or bucket_profile(report)
    wanted = sorted(set(int(b) for b in buckets), reverse=True)
    low, high = min(p.output), max(p.output)
    beyond = [b for b in wanted if not low <= b <= high]
    if beyond:
        raise PredictionError(
            f"bucket{'s' if len(beyond) > 1 else ''} {', '.join(map(str, beyond))} "
            f"{'lie' if len(beyond) > 1 else 'lies'} outside the profiled buckets of {report.path} "
            f"({low} to {high}); predict a list within them, or profile a wider range"
        )
    if report.run.order != Order.LARGEST_FIRST:
        raise PredictionError(
            "bucket-list predictions model largest-first capture; profile with the default order"
        )
    top = wanted[0]
    notes = []
    if top != p.largest:
        notes.append(
            f"the list's largest bucket ({top}) is not the profile's ({p.largest}): its graph "
            "executables "
            "are the profile's first bucket's (they include what the driver reserves once)"
        )
        notes.append(
            "needs free: an upper bound; the profile's larger pre-warm left blocks that its later "
            "warm-ups "
            "reused, so with a smaller largest bucket each warm-up may cache more"
        )
    if left_out:
        notes.append(
            "recorded groups without an allocator trace left out: "
            + "; ".join(left_out[g] for g in list(left_out)[:MAX_LISTED])
        )
    out, drawn = [], {}
    chosen = [m for m in (modes or report.modes()) if m in p.rows and p.largest in p.rows[m]]
    # each mode's trace read and checked side by side (the list's largest bucket comes from
    # per-bucket's in shared-largest and floor modes, unless it is the profile's): the loop below
    # finds them done
    sources = p.replayer.bucket_sources
    needed = dict.fromkeys(chosen)
    if top != p.largest and {Mode.SHARED_LARGEST, Mode.FLOOR} & set(chosen):
        needed[Mode.PER_BUCKET] = None
    check_traces([(sources, m) for m in needed if m in sources.traces])
    for mode in chosen:
        rows = p.rows[mode]
        first = rows[p.largest]
        try:
            if mode == chosen[0]:  # every mode's list checked, its work bounded, before any replay
                p.replayer.bucket_sources.check_lists(chosen, wanted)
            replay = p.replayer.replay(mode, wanted)
            # placement matters only for segments the traces give no address for: with none, the
            # other is the same
            other = p.replayer.other_placement().replay(mode, wanted) if replay.made_up else replay
        except ReplayError as e:
            raise PredictionError(str(e)) from None
        predicted, before = [], 0
        for order, (bucket, pool, source) in enumerate(
            zip(replay.buckets, replay.pool_bytes, replay.sources, strict=True)
        ):
            between = p.replayer.bucket_sources.interpolated(source, bucket)
            if between:
                drawn[bucket] = between
            # the list's largest bucket: the mode's one-off costs are the profile's first bucket's
            if order == 0:
                src = rows.get(bucket) or first
                outside = _outside_first(mode, first, p, top)
                non_torch = first.non_torch_delta_bytes
                retained = _output(p, top)
                if source != mode:
                    notes.append(
                        f"{mode}: bucket {bucket} keeps its own output, so its events are those of "
                        "the "
                        f"{source} capture of it"
                    )
            else:
                src = _row(p, mode, bucket)
                outside = src.torch_reserved_delta_bytes - src.pool_delta_bytes
                # from the staircase, not the row's rounded delta
                non_torch = _executables(p, mode, bucket)
                retained = _output(p, bucket) if mode == Mode.PER_BUCKET else 0
            predicted.append(
                BucketPrediction(
                    mode=mode,
                    bucket=bucket,
                    order=order,
                    segments=src.segments,
                    graph_nodes=src.graph_nodes,
                    pool_bytes=pool,
                    pool_delta_bytes=pool - before,
                    outside_pool_delta_bytes=outside,
                    non_torch_delta_bytes=non_torch,
                    device_used_delta_bytes=pool - before + outside + non_torch,
                    retained_output_bytes=retained,
                    interpolated_from=between,
                )
            )
            before = pool
        interpolated = sum(1 for r in predicted if r.interpolated_from)
        band = p.bands[mode].band(len(predicted), interpolated)
        result = _banded(mode_totals(mode, predicted, 0.0), band)
        result.exact = replay.exact and not interpolated  # recorded events only
        result.needs_free = _needs_free(p, mode, predicted, replay.sources, free)
        result.band_source = f"{POOL_REPLAYED}; {band.source}"
        shift = other.pool_bytes[-1] - replay.pool_bytes[-1]
        if other.pool_bytes != replay.pool_bytes:
            # the driver's address for a segment the profile never made is unknown: the band spans
            # both placements
            result.other_placement_pool_bytes = other.pool_bytes[-1]
            result.low_bytes += min(0, shift)
            result.high_bytes += max(0, shift)
            result.band_source += (
                f"; with new segments placed below the others instead of above, the pool ends "
                f"{shift / MIB:+.0f} MiB away: the band spans both"
            )
            notes.append(
                f"{mode}: where the driver puts the segments this list makes decides "
                f"{abs(shift) / MIB:.0f} "
                "MiB of the pool (best-fit ties); the band spans both placements"
            )
        out.append(result)
    if profile is None:  # a prediction on its own: its replays serve the next command's
        for mode in chosen:
            p.replayer.keep_store(mode)
    out.sort(key=lambda m: mode_index(m.mode))
    if drawn:
        listed = ", ".join(f"{b} ({lo}-{hi})" for b, (lo, hi) in sorted(drawn.items())[:MAX_LISTED])
        more = f" and {len(drawn) - MAX_LISTED} more" if len(drawn) > MAX_LISTED else ""
        notes.append(
            "interpolated (not profiled; each allocation's size on the line between the profiled "
            "buckets "
            f"around it): {listed}{more}"
        )
    notes += too_wide_notes(
        out, ": the evidence does not pin this list down (see the band's source)"
    )
    return Prediction(
        kind="buckets",
        model=report.run.model,
        gpu=report.run.gpu_name,
        layers=int(report.run.layers),
        bucket_list=sorted(wanted),
        modes=out,
        basis=[str(report.path)],
        notes=notes,
    )


def _output(p: BucketProfile, bucket: int) -> int:
    """The bucket's output bytes: measured, or on the line between its profiled neighbours (rows x
    width)."""
    if bucket in p.output:
        return p.output[bucket]
    around = neighbours(p.outputs, bucket)
    assert around is not None  # predict_buckets refused buckets outside the profiled range
    lo, hi = around
    return line_size(bucket, lo, p.output[lo], hi, p.output[hi])


def _row(p: BucketProfile, mode: str, bucket: int) -> BucketRecord:
    """The bucket's measured row; for a bucket not profiled, the nearer neighbour's among the later
    buckets (its graphs, nodes and memory outside the pool: the same kernels, launched on a few more
    or fewer tokens)."""
    rows = p.rows[mode]
    if bucket in rows:
        return rows[bucket]
    later = p.profiled[mode][:-1] if p.profiled[mode][-1:] == [p.largest] else p.profiled[mode]
    at = bisect_left(later, bucket)  # the nearest is just below or just above; the smaller on a tie
    return rows[min(later[max(at - 1, 0) : at + 1], key=lambda b: (abs(b - bucket), b))]


def _executables(p: BucketProfile, mode: str, bucket: int) -> int:
    """A later bucket's graph executables from the mode's staircase; a bucket not profiled costs the
    mean of its neighbours' (an executable's bytes follow its graphs and nodes, which it shares with
    them)."""
    each = p.executables[mode]
    if bucket in each:
        return each[bucket]
    known = [each[b] for b in neighbours(p.profiled[mode], bucket) or () if b in each]
    return round(sum(known) / len(known)) if known else 0


def _needs_free(
    p: BucketProfile,
    mode: str,
    rows: list[BucketPrediction],
    sources: Sequence[str],
    free: Optional[int],
) -> Optional[NeedsFree]:
    """The free memory the list needs: each bucket's warm-up growth from the trace its events came
    from, with the bytes the prediction says it keeps."""
    growth, outside = {}, {}
    for row, source in zip(rows, sources, strict=True):
        g = p.replayer.bucket_sources.warmup.get(source, {}).get(row.bucket)
        if g is None or source not in p.rows:
            return None
        measured = _row(p, source, row.bucket)
        growth[row.bucket] = g
        outside[row.bucket] = measured.torch_reserved_delta_bytes - measured.pool_delta_bytes
    upside = 0
    # a smaller pre-warm leaves less for the warm-ups to reuse
    if rows and rows[0].bucket != p.largest:
        upside = max(
            (p.replayer.bucket_sources.leftover.get(s, 0) for s in set(sources)), default=0
        )
    h = traced_needs(mode, rows, growth, outside, upside)
    return h.check(free) if free is not None else h


OWN_LIST = "the profile's own list: device used measured; the free-memory check predicted"


def predict_own_list(report: Report, free: Optional[int] = None) -> Prediction:
    """The profile's own list: every mode's measured totals and the free memory it needed, and with
    ``free`` the first bucket that would run out. From the allocator traces when the report has them
    (the warm-up's cache to the byte, and the least a warm-up needs), else from each bucket's
    measured NVML peak."""
    if len(untraced(report)) < len(report.modes()):  # a capture, or a recording with a trace
        report = as_profile(report)
    check_usable(report)
    if report.run.order == Order.LARGEST_FIRST and trace_files(report.path, report.modes()):
        pred = predict_buckets(report, report.run.buckets, free=free)
        pred.notes.insert(0, "the profile's own list, replayed from its allocator traces")
        return pred
    modes = []
    for mode in report.modes():
        rows = report_rows(report, mode)
        h = measured_needs(mode, rows)
        if h is None:
            raise PredictionError(NO_PEAKS.format(path=report.path))
        used = sum(r.device_used_delta_bytes for r in rows)
        m = ModePrediction(
            mode=mode,
            device_used_bytes=used,
            pool_bytes=rows[-1].pool_bytes,
            non_torch_bytes=sum(r.non_torch_delta_bytes for r in rows),
            low_bytes=used,
            high_bytes=used,
            exact=True,
            band_source="measured",
        )
        m.needs_free = h.check(free) if free is not None else h
        modes.append(m)
    return Prediction(
        kind="buckets",
        model=report.run.model,
        gpu=report.run.gpu_name,
        layers=int(report.run.layers),
        bucket_list=sorted(report.run.buckets),
        modes=modes,
        basis=[str(report.path)],
        label=OWN_LIST,
        notes=[
            "no allocator traces: each warm-up's cache is its bucket's measured NVML peak less "
            "what it kept (sampled); a warm-up is short for certain below its bucket's allocated "
            "peak (peak_transient_bytes)"
        ],
    )


def list_band(p: BucketProfile, mode: str, rows: int) -> int:
    """How far the band of a ``rows``-bucket list prediction in ``mode`` reaches above its point
    (what
    :func:`predict_buckets` adds to its figure for ``high_bytes``): the pool is replayed exactly, so
    the band is the executables' residuals on held-out lists
    (:mod:`bcgprof.analysis.predict.bands`)."""
    return p.bands[mode].band(rows).above


def _banded(m: ModePrediction, band: Band) -> ModePrediction:
    m.low_bytes, m.high_bytes = m.device_used_bytes - band.below, m.device_used_bytes + band.above
    m.band_lists, m.band_max_abs_error_bytes = band.lists, band.max_abs_error_bytes
    return m


def _outside_first(mode: str, first: BucketRecord, p: BucketProfile, top: int) -> int:
    """Torch memory outside the pool taken by the first bucket: the shared buffer in shared mode."""
    measured = first.torch_reserved_delta_bytes - first.pool_delta_bytes
    if mode == Mode.SHARED and top != p.largest:
        # the buffer is sized for the list's largest bucket
        return measured - round_up(p.output[p.largest]) + round_up(_output(p, top))
    return measured
