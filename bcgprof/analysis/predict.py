"""`bcgprof predict`: a capture's cost at another layer count, or for another bucket list, from
reports already measured. Pure functions over reports; every figure is a prediction, labelled so.

How capture cost depends on the layer count (evidence: docs/evidence-predict.md): one layer's
working set sets the graph pool, so from :data:`STEADY_LAYERS` layers on its rows stop changing,
except where the segments' address layout, which another depth changes, decides a best-fit tie;
graphs, kernel nodes and the graph executables' driver memory grow by a constant per layer.

* :func:`predict_layers` takes the pool rows (and torch memory outside the pool) from the deepest
  input, extends graph and node counts along lines in the layer count, and predicts executables
  from the slope of each input's NVML staircase (one bucket's executables, far finer than the 2 MiB
  steps of the running non-torch total; a line in the layer count). The first bucket's executables
  are a later bucket's less what the driver had reserved. The band: twice the propagated slope
  error, two NVML steps, the pool's change if the deepest input is under the steady depth, and the
  pools its list replays to at random segment addresses (:mod:`bcgprof.analysis.layout_spread`).
  Needs free: each bucket's measured peak above what it kept at the deepest input (its warm-up's
  cache, the same at any depth) on top of the predicted kept bytes, banded by the deeper captures
  committed (:func:`bcgprof.analysis.bands.layer_needs_free_band`).
* :func:`predict_buckets` predicts another bucket list drawn from one profile: the graph pool by
  replaying the profile's allocator traces through a model of PyTorch's caching allocator
  (:mod:`bcgprof.analysis.replay`), exact for every list of profiled buckets; each bucket's torch
  memory outside the pool and graphs as its measured row; each later bucket's executables read
  from the mode's NVML staircase (:mod:`bcgprof.analysis.executables`), the first's as the
  profile's first row. The band comes from measured residuals of held-out lists
  (:mod:`bcgprof.analysis.bands`). A report without traces is refused. A bucket inside the profiled
  range but not profiled is interpolated (:mod:`bcgprof.analysis.replay_interpolate`, labelled);
  one outside it is refused. Where a new segment's address decides a best-fit tie, the list is
  replayed with such segments placed above and below the others, and the band spans both.

Invariant: no mode total below zero, no band without its point (:mod:`bcgprof.analysis.possible`).
Cost: a layer prediction is linear in the reports' rows, plus ``layout_spread.LAYOUTS`` replays of
the deepest input's list per mode, once per trace (cached); a list prediction is one replay per
mode, two where a segment had no recorded address (a replay's cost: :mod:`bcgprof.analysis.replay`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from bcgprof.analysis.bands import TOO_WIDE, Band, ListBands, layer_band_source, layer_needs_free_band, too_wide
from bcgprof.analysis.executables import later_executables, staircase_slope
from bcgprof.analysis.fit import Fit, least_squares
from bcgprof.analysis.headroom import Headroom, headroom_json, layered_headroom, measured_headroom, traced_headroom
from bcgprof.analysis.layout_spread import NO_TRACE, layout_spread
from bcgprof.analysis.possible import check_executables, check_possible
from bcgprof.analysis.replay import Replayer, ReplayError
from bcgprof.analysis.replay_interpolate import line_size, neighbours
from bcgprof.errors import BcgprofError, PredictionError
from bcgprof.options import mode_index
from bcgprof.report import BucketRecord, Report
from bcgprof.vocab import Mode, Order

LABEL = "predicted, not measured"
MIB = 1 << 20
MAX_LISTED = 8  # interpolated buckets named in a note
SEGMENT_ROUND = 2 << 20  # the allocator's large segments come in 2 MiB steps, and so does NVML's count
STEADY_LAYERS = 4  # from this depth on one layer's working set sets the pool
LAYER_HEADROOM = ("each bucket's measured peak above what it kept from the {layers}-layer capture (its eager warm-up's "
                  "cache: one layer's working set, the same at any depth), on top of the predicted kept bytes")


@dataclass
class BucketPrediction:
    mode: str
    bucket: int
    order: int
    segments: int
    graph_nodes: Optional[int]
    pool_bytes: int
    pool_delta_bytes: int
    outside_pool_delta_bytes: int
    non_torch_delta_bytes: int
    device_used_delta_bytes: int
    retained_output_bytes: int
    interpolated_from: Optional[tuple[int, int]] = None  # not profiled: the profiled buckets it was drawn from


@dataclass
class ModePrediction:
    mode: str
    device_used_bytes: int
    pool_bytes: int
    non_torch_bytes: int
    low_bytes: int
    high_bytes: int
    buckets: list[BucketPrediction] = field(default_factory=list)
    exact: bool = False  # every event of the list's buckets replayed (bucket lists); False for layer predictions
    band_source: str = ""  # what the band was derived from
    band_lists: int = 0  # held-out lists behind the band (bucket lists; 0: no evidence)
    band_max_abs_error_bytes: Optional[int] = None  # the largest residual among them
    headroom: Optional[Headroom] = None  # the free memory the list needs (bucket lists; None for layer predictions)
    other_placement_pool_bytes: Optional[int] = None  # the pool with new segments placed the other way, if it differs

    @property
    def band_too_wide(self) -> bool:
        """A band wider than :data:`bcgprof.analysis.bands.MAX_WIDTH` of its value: not a result."""
        return too_wide(self.low_bytes, self.high_bytes, self.device_used_bytes)


@dataclass
class Prediction:
    kind: str  # layers | buckets
    model: str
    gpu: str
    layers: int
    bucket_list: list[int]
    modes: list[ModePrediction]
    basis: list[str]  # the reports it was made from
    notes: list[str] = field(default_factory=list)
    label: str = LABEL

    def __post_init__(self) -> None:
        check_possible(self.modes)  # never a figure below zero, nor a band without its point

    def mode(self, name: str) -> Optional[ModePrediction]:
        return next((m for m in self.modes if m.mode == name), None)


def _rows(report: Report, mode: str, rank: int = 0) -> list[BucketRecord]:
    return sorted((r for r in report.buckets if r.mode == mode and r.rank == rank), key=lambda r: r.order)


def _check_usable(report: Report) -> None:
    if report.run.status != "complete":
        raise PredictionError(f"{report.path} is {report.run.status}; predict from complete reports only")
    if any(r.status != "ok" for r in report.buckets):
        raise PredictionError(f"{report.path} has failed buckets; predict from a report whose buckets all "
                              "captured")
    if report.run.tp != 1:
        raise PredictionError(f"{report.path} is a tensor-parallel report; predict works on single-GPU reports")


def _line(xs: Sequence[float], ys: Sequence[float]) -> Fit:
    """The least-squares line y = a + b x (``coef`` is (a, b); b is 0 when the xs are all equal)."""
    return least_squares([[1.0] * len(xs), [float(x) for x in xs]], ys)


def _at(xs: Sequence[int], ys: Sequence[int], x: int) -> tuple[int, float]:
    """``ys`` as a function of ``xs`` at ``x``: the common value when all agree, else the fitted line."""
    if len(set(ys)) == 1:
        return int(ys[0]), 0.0
    line = _line(xs, [float(v) for v in ys])
    return round(line.at((1.0, x))), line.max_misfit


# ---------------------------------------------------------------- layers


def predict_layers(reports: Sequence[Report], layers: Optional[int] = None,
                   free: Optional[int] = None) -> Prediction:
    """Every mode's totals and every bucket's row at ``layers`` (default: the model's full depth), and the
    free memory each mode needs (with ``free``: whether it fits, else the first bucket that runs out)."""
    if len(reports) < 2:
        raise PredictionError("predicting another layer count needs reports at two or more layer counts; "
                              "capture with --num-layers 2,4 and pass both with --from")
    for r in reports:
        _check_usable(r)
    first = reports[0]
    for r in reports[1:]:
        for name, label in (("config_hash", "models"), ("gpu_name", "GPUs"), ("buckets", "bucket lists"),
                            ("dtype", "dtypes"), ("phase", "phases"), ("graph", "graph kinds"),
                            ("order", "capture orders"), ("weights", "weights")):
            if getattr(r.run, name) != getattr(first.run, name):
                raise PredictionError(f"{first.path} and {r.path} differ in {label} ({getattr(first.run, name)!r} "
                                      f"vs {getattr(r.run, name)!r}); predict from captures that differ in the "
                                      "layer count only")
    counts = [int(r.run.layers) for r in reports]
    if min(counts) < 1:  # 0 is run.json's default when the field is absent: no depth to fit a line through
        raise PredictionError(f"{reports[counts.index(min(counts))].path} records no layer count (run.json's "
                              "layers); predict from reports that `capture --num-layers` wrote")
    if len(set(counts)) < 2:
        raise PredictionError(f"all reports have {counts[0]} layers; pass captures at two or more layer counts")
    if len(set(counts)) != len(counts):
        raise PredictionError("two reports have the same layer count; pass one report per layer count")
    target = layers or _full_depth(first)
    if target < 1:
        raise PredictionError(f"--num-layers must be at least 1, got {target}")
    if target < STEADY_LAYERS:  # the pool rows come from another depth: only right once they have settled
        raise PredictionError(f"{target} layers is below {STEADY_LAYERS}, where the graph pool settles "
                              "(below it the pool still changes with depth), so it cannot be taken "
                              f"from another depth; predict {STEADY_LAYERS} layers or more, or capture "
                              f"with --num-layers {target}")
    common = [m for m in first.modes() if all(_rows(r, m) for r in reports)]
    if not common:
        raise PredictionError("the reports share no mode")
    order = sorted(range(len(reports)), key=lambda i: counts[i])
    deepest, next_deepest = order[-1], order[-2]
    notes = [f"graph pool and torch memory outside it: from the {counts[deepest]}-layer capture "
             f"(from {STEADY_LAYERS} layers on one layer's working set sets the pool, but the "
             "segments' address layout, which another depth changes, can move it: the band spans "
             "the pools its trace, where it has one, replays to in random layouts)"]
    if counts[deepest] < STEADY_LAYERS:
        notes.append(f"the deepest capture has {counts[deepest]} layers, fewer than {STEADY_LAYERS}: its pool may "
                     "not be the full model's; the band includes its change from the next count")
    modes, laid = [], []  # laid: the modes whose band spans the pool's layouts
    free_band, free_source = layer_needs_free_band()
    rows_of = {mode: [_rows(r, mode) for r in reports] for mode in common}  # mode -> each report's rows
    steps = {}  # mode -> per-report executable bytes per later bucket, and their standard errors
    for mode, per_report in rows_of.items():
        buckets = [row.bucket for row in per_report[0]]
        if any([row.bucket for row in rows] != buckets for rows in per_report):
            raise PredictionError(f"mode {mode}: the reports captured different buckets")
        if len(buckets) > 1:
            steps[mode] = [staircase_slope(rows[1:]) for rows in per_report]
    for mode, per_report in rows_of.items():
        buckets = [row.bucket for row in per_report[0]]
        # Executables (non-torch): every later bucket adds the same graphs, so their NVML total climbs a
        # staircase of 2 MiB steps whose slope is one bucket's executables; that slope is a line in the
        # layer count. The first bucket's executables are a later bucket's, less what the driver had
        # already reserved (the few-layer captures' first buckets show that reserve).
        basis = steps.get(mode) or next(iter(steps.values()), None)
        if basis is None:
            raise PredictionError("the reports have one bucket per mode; predicting executables needs more")
        slopes, errors = [c for c, _ in basis], [e for _, e in basis]
        # the slope at the target depth, its misfit, and its error propagated from each input's slope
        line = _line(counts, slopes)
        each, misfit = line.at((1.0, target)), line.max_misfit
        check_executables(mode, counts, slopes, target, each)
        weights = line.weights_at((1.0, target))
        each_error = math.sqrt(sum((w * e) ** 2 for w, e in zip(weights, errors, strict=True)))
        reserve = max(0.0, max(c - rows[0].non_torch_delta_bytes for c, rows in zip(slopes, per_report)))
        first_line, _ = _at(counts, [rows[0].non_torch_delta_bytes for rows in per_report], target)
        first_nt = max(first_line, _round_up(int(each - reserve)) if each > reserve else 0)
        predicted, pool = [], 0
        for i, bucket in enumerate(buckets):
            rows = [rs[i] for rs in per_report]
            segments, _ = _at(counts, [r.segments for r in rows], target)
            nodes = None
            if all(r.graph_nodes is not None for r in rows):
                nodes, _ = _at(counts, [r.graph_nodes or 0 for r in rows], target)  # none is None here
            deep = rows[deepest]
            pool_delta = deep.pool_delta_bytes
            outside = deep.torch_reserved_delta_bytes - deep.pool_delta_bytes
            non_torch = first_nt if i == 0 else int(round(each * i) - round(each * (i - 1)))
            pool += pool_delta
            predicted.append(BucketPrediction(
                mode=mode, bucket=bucket, order=i, segments=segments, graph_nodes=nodes, pool_bytes=pool,
                pool_delta_bytes=pool_delta, outside_pool_delta_bytes=outside, non_torch_delta_bytes=non_torch,
                device_used_delta_bytes=pool_delta + outside + non_torch,
                retained_output_bytes=deep.retained_output_bytes))
        unsettled = 0
        if counts[deepest] < STEADY_LAYERS:
            unsettled = abs(sum(r.torch_reserved_delta_bytes for r in per_report[deepest])
                            - sum(r.torch_reserved_delta_bytes for r in per_report[next_deepest]))
        later = len(buckets) - 1
        # the first bucket's reserve is a bound read in 2 MiB steps: two steps either way
        band = 2.0 * later * each_error + later * misfit + 2 * SEGMENT_ROUND + unsettled
        result = _mode(mode, predicted, band)
        result.band_source = layer_band_source(first.run)
        spread = layout_spread(reports[deepest], mode, per_report[deepest])  # another depth, another layout
        if spread is None:
            result.band_source += f"; {NO_TRACE.format(path=reports[deepest].path)}"
        elif spread.below or spread.above:
            result.low_bytes, result.high_bytes = result.low_bytes - spread.below, result.high_bytes + spread.above
            result.band_source += f"; {spread.note(counts[deepest])}"
            laid.append(result)  # widened by the pool's layouts, not by the slopes
        result.headroom = layered_headroom(mode, predicted, per_report[deepest], free_band,
                                           f"{LAYER_HEADROOM.format(layers=counts[deepest])}; band "
                                           f"±{free_band / MIB:.1f} MiB: {free_source}")
        if free is not None:
            if result.headroom is None:
                raise PredictionError(NO_PEAKS.format(path=reports[deepest].path))
            result.headroom.check(free)
        modes.append(result)
    notes.append(_per_layer_note(reports, counts, common[0], steps.get(common[0])))
    notes += _too_wide_notes(laid, ": the graph pool depends on where the driver places its segments (see its band); "
                                   "capture the full depth to pin it down")
    notes += _too_wide_notes([m for m in modes if m not in laid],
                             f": the extrapolation from {counts[next_deepest]} and {counts[deepest]} layers to "
                             f"{target} multiplies the slopes' error: capture deeper inputs to narrow it")
    return Prediction(kind="layers", model=first.run.model, gpu=first.run.gpu_name, layers=target,
                      bucket_list=list(first.run.buckets), modes=modes, basis=[str(r.path) for r in reports],
                      notes=notes)


def _per_layer_note(reports: Sequence[Report], counts: list[int], mode: str,
                    steps: Optional[list[tuple[float, float]]]) -> str:
    """What each layer adds to one bucket: graphs, kernel nodes and executable bytes."""
    lo, hi = counts.index(min(counts)), counts.index(max(counts))
    span = counts[hi] - counts[lo]
    pairs = list(zip(_rows(reports[lo], mode), _rows(reports[hi], mode)))
    graphs = sorted({(high.segments - low.segments) / span for low, high in pairs})
    counted = [(low.graph_nodes, high.graph_nodes) for low, high in pairs
               if low.graph_nodes is not None and high.graph_nodes is not None]
    nodes = sorted({(high - low) / span for low, high in counted})

    def spread(v: list[float]) -> str:
        return f"{v[0]:.0f}" if len(v) == 1 else f"{v[0]:.0f} to {v[-1]:.0f}"

    text = f"each layer adds to every bucket ({mode}): {spread(graphs)} graph(s), "
    # node counts need the CUDA bindings; a report captured without them has none to difference
    text += (f"{spread(nodes)} kernel nodes (by the bucket's kernels)" if len(counted) == len(pairs) and nodes
             else "kernel nodes not recorded")
    if steps:
        per = (steps[hi][0] - steps[lo][0]) / span
        text += f", {per / 1024:.0f} KiB of graph executables (slope of the NVML staircase over the buckets)"
    return text


def _full_depth(report: Report) -> int:
    try:
        from bcgprof.spec import resolve_model

        spec = resolve_model(report.run.model)
        if spec.config_hash == report.run.config_hash:
            return spec.num_layers
    except BcgprofError:
        pass
    raise PredictionError(f"the full depth of {report.run.model!r} is unknown here; pass --num-layers N")


def _mode(mode: str, rows: list[BucketPrediction], band: float) -> ModePrediction:
    """Totals of a mode's predicted rows, ``band`` (rounded up) either way."""
    used, width = sum(r.device_used_delta_bytes for r in rows), math.ceil(band)
    return ModePrediction(mode=mode, device_used_bytes=used, pool_bytes=rows[-1].pool_bytes if rows else 0,
                          non_torch_bytes=sum(r.non_torch_delta_bytes for r in rows), low_bytes=used - width,
                          high_bytes=used + width, buckets=rows)


# ---------------------------------------------------------------- bucket lists

NO_PEAKS = ("{path} does not record each bucket's device peak (device_peak_delta_bytes); re-capture it with this "
            "bcgprof to check --free")
NO_TRACES = ("{path} has no allocator traces (captured before they were recorded); re-capture with this bcgprof "
             "to predict other bucket lists")
POOL_REPLAYED = "pool: replayed exactly from the allocator traces"


def _round_up(n: int, step: int = SEGMENT_ROUND) -> int:
    return -(-n // step) * step


@dataclass
class BucketProfile:
    """What one report says about each bucket: its measured rows, and its allocator traces to replay."""

    largest: int
    output: dict[int, int]  # bucket -> output bytes
    rows: dict[str, dict[int, BucketRecord]]  # mode -> bucket -> row
    replayer: Replayer
    executables: dict[str, dict[int, int]] = field(default_factory=dict)  # mode -> later bucket -> bytes
    bands: dict[str, ListBands] = field(default_factory=dict)  # mode -> the evidence of its list bands
    # ascending, for bisection: a list of thousands of buckets not profiled looks each one's neighbours up
    profiled: dict[str, list[int]] = field(init=False, repr=False)  # mode -> its rows' buckets
    outputs: list[int] = field(init=False, repr=False)  # the buckets with an output size

    def __post_init__(self):
        self.profiled = {mode: sorted(rows) for mode, rows in self.rows.items()}
        self.outputs = sorted(self.output)


def bucket_profile(report: Report) -> BucketProfile:
    """The report's rows and traces, read once for many list predictions. Refuses a report without traces."""
    _check_usable(report)
    rows = {m: {r.bucket: r for r in _rows(report, m)} for m in report.modes()}
    measured = {m: [(r.bucket, r.pool_bytes) for r in _rows(report, m)] for m in rows}
    replayer = Replayer.load(report.path, list(rows), expected=measured)
    if replayer is None:
        raise PredictionError(NO_TRACES.format(path=report.path))
    largest = max(report.run.buckets)
    per_bucket = rows.get(Mode.PER_BUCKET, {})
    # without per-bucket rows: the largest bucket's output, in proportion (an output is rows x hidden)
    top = max((rs[largest].retained_output_bytes for rs in rows.values() if largest in rs), default=0)
    output = {b: per_bucket[b].retained_output_bytes if b in per_bucket else top * b // largest
              for b in report.run.buckets}
    executables = {m: later_executables(_rows(report, m)) for m in rows}
    bands = {m: ListBands(report.run, m, profile=_profile_name(report)) for m in rows}
    return BucketProfile(largest, output, rows, replayer, executables, bands)


def _profile_name(report: Report) -> str:
    """The report as the calibration names profiles (``reports/NAME``)."""
    return f"reports/{report.path.name}" if report.path else ""


def predict_buckets(report: Report, buckets: Sequence[int], modes: Optional[Sequence[str]] = None, *,
                    profile: Optional[BucketProfile] = None, free: Optional[int] = None) -> Prediction:
    """Each mode's cost for another bucket list drawn from the profiled buckets: the pool replayed from the
    allocator traces (:mod:`bcgprof.analysis.replay`), torch memory outside the pool and graph executables from each
    bucket's measured row. ``profile``: the report's :func:`bucket_profile`, when the caller predicts many
    lists from one report. Each mode's :class:`~bcgprof.analysis.headroom.Headroom` says what free memory the
    list needs; ``free``: check it against that many bytes free when the first bucket's warm-up begins."""
    p = profile or bucket_profile(report)
    wanted = sorted(set(int(b) for b in buckets), reverse=True)
    low, high = min(p.output), max(p.output)
    beyond = [b for b in wanted if not low <= b <= high]
    if beyond:
        raise PredictionError(f"bucket{'s' if len(beyond) > 1 else ''} {', '.join(map(str, beyond))} "
                              f"{'lie' if len(beyond) > 1 else 'lies'} outside the profiled buckets of {report.path} "
                              f"({low} to {high}); predict a list within them, or profile a wider range")
    if report.run.order != Order.LARGEST_FIRST:
        raise PredictionError("bucket-list predictions model largest-first capture; profile with the default order")
    top = wanted[0]
    notes = []
    if top != p.largest:
        notes.append(f"the list's largest bucket ({top}) is not the profile's ({p.largest}): its graph executables "
                     "are the profile's first bucket's (they include what the driver reserves once)")
        notes.append("needs free: an upper bound; the profile's larger pre-warm left blocks that its later warm-ups "
                     "reused, so with a smaller largest bucket each warm-up may cache more")
    out, drawn = [], {}
    chosen = [m for m in (modes or report.modes()) if m in p.rows and p.largest in p.rows[m]]
    for mode in chosen:
        rows = p.rows[mode]
        first = rows[p.largest]
        try:
            if mode == chosen[0]:  # every mode's list checked, its work bounded, before any replay
                p.replayer.check_lists(chosen, wanted)
            replay = p.replayer.replay(mode, wanted)
            # placement matters only for segments the traces give no address for: with none, the other is the same
            other = p.replayer.other_placement().replay(mode, wanted) if replay.made_up else replay
        except ReplayError as e:
            raise PredictionError(str(e)) from None
        predicted, before = [], 0
        for order, (bucket, pool, source) in enumerate(zip(replay.buckets, replay.pool_bytes, replay.sources, strict=True)):
            between = p.replayer.interpolated(source, bucket)
            if between:
                drawn[bucket] = between
            if order == 0:  # the list's largest bucket: the mode's one-off costs are the profile's first bucket's
                src = rows.get(bucket) or first
                outside = _outside_first(mode, first, p, top)
                non_torch = first.non_torch_delta_bytes
                retained = _output(p, top)
                if source != mode:
                    notes.append(f"{mode}: bucket {bucket} keeps its own output, so its events are those of the "
                                 f"{source} capture of it")
            else:
                src = _row(p, mode, bucket)
                outside = src.torch_reserved_delta_bytes - src.pool_delta_bytes
                non_torch = _executables(p, mode, bucket)  # from the staircase, not the row's rounded delta
                retained = _output(p, bucket) if mode == Mode.PER_BUCKET else 0
            predicted.append(BucketPrediction(
                mode=mode, bucket=bucket, order=order, segments=src.segments, graph_nodes=src.graph_nodes,
                pool_bytes=pool, pool_delta_bytes=pool - before, outside_pool_delta_bytes=outside,
                non_torch_delta_bytes=non_torch, device_used_delta_bytes=pool - before + outside + non_torch,
                retained_output_bytes=retained, interpolated_from=between))
            before = pool
        interpolated = sum(1 for r in predicted if r.interpolated_from)
        band = p.bands[mode].band(len(predicted), interpolated)
        result = _banded(_mode(mode, predicted, 0.0), band)
        result.exact = replay.exact and not interpolated  # recorded events only
        result.headroom = _headroom(p, mode, predicted, replay.sources, free)
        result.band_source = f"{POOL_REPLAYED}; {band.source}"
        shift = other.pool_bytes[-1] - replay.pool_bytes[-1]
        if other.pool_bytes != replay.pool_bytes:
            # the driver's address for a segment the profile never made is unknown: the band spans both placements
            result.other_placement_pool_bytes = other.pool_bytes[-1]
            result.low_bytes += min(0, shift)
            result.high_bytes += max(0, shift)
            result.band_source += (f"; with new segments placed below the others instead of above, the pool ends "
                                   f"{shift / MIB:+.0f} MiB away: the band spans both")
            notes.append(f"{mode}: where the driver puts the segments this list makes decides {abs(shift) / MIB:.0f} "
                         "MiB of the pool (best-fit ties); the band spans both placements")
        out.append(result)
    out.sort(key=lambda m: mode_index(m.mode))
    if drawn:
        listed = ", ".join(f"{b} ({lo}-{hi})" for b, (lo, hi) in sorted(drawn.items())[:MAX_LISTED])
        more = f" and {len(drawn) - MAX_LISTED} more" if len(drawn) > MAX_LISTED else ""
        notes.append(f"interpolated (not profiled; each allocation's size on the line between the profiled buckets "
                     f"around it): {listed}{more}")
    notes += _too_wide_notes(out, ": the evidence does not pin this list down (see the band's source)")
    return Prediction(kind="buckets", model=report.run.model, gpu=report.run.gpu_name, layers=int(report.run.layers),
                      bucket_list=sorted(wanted), modes=out, basis=[str(report.path)], notes=notes)


def _output(p: BucketProfile, bucket: int) -> int:
    """The bucket's output bytes: measured, or on the line between its profiled neighbours (rows x width)."""
    if bucket in p.output:
        return p.output[bucket]
    around = neighbours(p.outputs, bucket)
    assert around is not None  # predict_buckets refused buckets outside the profiled range
    lo, hi = around
    return line_size(bucket, lo, p.output[lo], hi, p.output[hi])


def _row(p: BucketProfile, mode: str, bucket: int) -> BucketRecord:
    """The bucket's measured row; for a bucket not profiled, the nearer neighbour's among the later buckets (its
    graphs, nodes and memory outside the pool: the same kernels, launched on a few more or fewer tokens)."""
    rows = p.rows[mode]
    if bucket in rows:
        return rows[bucket]
    later = p.profiled[mode][:-1] if p.profiled[mode][-1:] == [p.largest] else p.profiled[mode]
    at = bisect_left(later, bucket)  # the nearest is just below or just above; the smaller on a tie
    return rows[min(later[max(at - 1, 0):at + 1], key=lambda b: (abs(b - bucket), b))]


def _executables(p: BucketProfile, mode: str, bucket: int) -> int:
    """A later bucket's graph executables from the mode's staircase; a bucket not profiled costs the mean of its
    neighbours' (an executable's bytes follow its graphs and nodes, which it shares with them)."""
    each = p.executables[mode]
    if bucket in each:
        return each[bucket]
    known = [each[b] for b in neighbours(p.profiled[mode], bucket) or () if b in each]
    return round(sum(known) / len(known)) if known else 0


def _headroom(p: BucketProfile, mode: str, rows: list[BucketPrediction], sources: Sequence[str],
              free: Optional[int]) -> Optional[Headroom]:
    """The free memory the list needs: each bucket's warm-up growth from the trace its events came from, with
    the bytes the prediction says it keeps."""
    growth, outside = {}, {}
    for row, source in zip(rows, sources, strict=True):
        g = p.replayer.warmup.get(source, {}).get(row.bucket)
        if g is None or source not in p.rows:
            return None
        measured = _row(p, source, row.bucket)
        growth[row.bucket] = g
        outside[row.bucket] = measured.torch_reserved_delta_bytes - measured.pool_delta_bytes
    upside = 0
    if rows and rows[0].bucket != p.largest:  # a smaller pre-warm leaves less for the warm-ups to reuse
        upside = max((p.replayer.leftover.get(s, 0) for s in set(sources)), default=0)
    h = traced_headroom(mode, rows, growth, outside, upside)
    return h.check(free) if free is not None else h


OWN_LIST = "the profile's own list: device used measured; the free-memory check predicted"


def predict_own_list(report: Report, free: Optional[int] = None) -> Prediction:
    """The profile's own list: every mode's measured totals and the free memory it needed, and with ``free``
    the first bucket that would run out. From the allocator traces when the report has them (the warm-up's
    cache to the byte, and the least a warm-up needs), else from each bucket's measured NVML peak."""
    _check_usable(report)
    if report.run.order == Order.LARGEST_FIRST and Replayer.load(report.path, report.modes()) is not None:
        pred = predict_buckets(report, report.run.buckets, free=free)
        pred.notes.insert(0, "the profile's own list, replayed from its allocator traces")
        return pred
    modes = []
    for mode in report.modes():
        rows = _rows(report, mode)
        h = measured_headroom(mode, rows)
        if h is None:
            raise PredictionError(NO_PEAKS.format(path=report.path))
        used = sum(r.device_used_delta_bytes for r in rows)
        m = ModePrediction(mode=mode, device_used_bytes=used, pool_bytes=rows[-1].pool_bytes,
                           non_torch_bytes=sum(r.non_torch_delta_bytes for r in rows), low_bytes=used,
                           high_bytes=used, exact=True, band_source="measured")
        m.headroom = h.check(free) if free is not None else h
        modes.append(m)
    return Prediction(kind="buckets", model=report.run.model, gpu=report.run.gpu_name,
                      layers=int(report.run.layers), bucket_list=sorted(report.run.buckets), modes=modes,
                      basis=[str(report.path)], label=OWN_LIST,
                      notes=["no allocator traces: each warm-up's cache is its bucket's measured NVML peak less "
                             "what it kept (sampled); a warm-up is short for certain below its bucket's allocated "
                             "peak (peak_transient_bytes)"])


def list_band(p: BucketProfile, mode: str, rows: int) -> int:
    """How far the band of a ``rows``-bucket list prediction in ``mode`` reaches above its point (what
    :func:`predict_buckets` adds to its figure for ``high_bytes``): the pool is replayed exactly, so the band
    is the executables' residuals on held-out lists (:mod:`bcgprof.analysis.bands`)."""
    return p.bands[mode].band(rows).above


def _banded(m: ModePrediction, band: Band) -> ModePrediction:
    m.low_bytes, m.high_bytes = m.device_used_bytes - band.below, m.device_used_bytes + band.above
    m.band_lists, m.band_max_abs_error_bytes = band.lists, band.max_abs_error_bytes
    return m


def _too_wide_notes(modes: Sequence[ModePrediction], why: str = "") -> list[str]:
    return [f"{m.mode}: the band ({(m.high_bytes - m.low_bytes) / (1 << 20):.0f} MiB) is {TOO_WIDE}{why}"
            for m in modes if m.band_too_wide]


def _outside_first(mode: str, first: BucketRecord, p: BucketProfile, top: int) -> int:
    """Torch memory outside the pool taken by the first bucket: the shared buffer in shared mode."""
    measured = first.torch_reserved_delta_bytes - first.pool_delta_bytes
    if mode == Mode.SHARED and top != p.largest:
        # the buffer is sized for the list's largest bucket
        return measured - _round_up(p.output[p.largest]) + _round_up(_output(p, top))
    return measured


def prediction_json(pred: Prediction) -> dict:
    """The JSON contract of `bcgprof predict -f json`."""
    return {
        "kind": pred.kind, "label": pred.label, "model": pred.model, "gpu": pred.gpu, "layers": pred.layers,
        "buckets": pred.bucket_list, "basis": pred.basis, "notes": pred.notes,
        "modes": [{"mode": m.mode, "device_used_bytes": m.device_used_bytes, "pool_bytes": m.pool_bytes,
                   "non_torch_bytes": m.non_torch_bytes, "low_bytes": m.low_bytes, "high_bytes": m.high_bytes,
                   "exact": m.exact, "band_source": m.band_source,
                   "band_low_bytes": m.low_bytes, "band_high_bytes": m.high_bytes, "band_lists": m.band_lists,
                   "band_max_abs_error_bytes": m.band_max_abs_error_bytes, "band_too_wide": m.band_too_wide,
                   "other_placement_pool_bytes": m.other_placement_pool_bytes,
                   **headroom_json(m.headroom),
                   "rows": [{"bucket": r.bucket, "order": r.order, "segments": r.segments,
                             "graph_nodes": r.graph_nodes, "pool_bytes": r.pool_bytes,
                             "pool_delta_bytes": r.pool_delta_bytes,
                             "outside_pool_delta_bytes": r.outside_pool_delta_bytes,
                             "non_torch_delta_bytes": r.non_torch_delta_bytes,
                             "device_used_delta_bytes": r.device_used_delta_bytes,
                             "retained_output_bytes": r.retained_output_bytes,
                             "interpolated_from": list(r.interpolated_from) if r.interpolated_from else None}
                            for r in m.buckets]}
                  for m in pred.modes],
    }
