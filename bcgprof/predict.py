"""`bcgprof predict`: a capture's cost at another layer count, or for another bucket list,
from reports already measured. Pure functions over reports; every figure here is a
prediction and is labelled so.

How capture cost depends on the layer count (found from measurements; see the README):
the graph pool is set by one layer's working set, so from 4 layers on its rows do not change
with depth; graphs (segments) and their kernel nodes grow by a constant per layer, and so
does the driver memory of the graph executables, which NVML sees and the allocator does not.

* :func:`predict_layers` takes the pool rows (and torch memory outside the pool) from the
  deepest input, extends graph and node counts along straight lines in the layer count, and
  predicts executables from the slope of each input's NVML staircase: the running non-torch
  total over a mode's later buckets climbs in 2 MiB steps, and its least-squares slope (one
  bucket's executables) is far finer than a step. That slope is a line in the layer count.
  The first bucket's executables are a later bucket's less what the driver had reserved.
  The band is twice the propagated slope error, two NVML steps, and the pool's change when
  the deepest input is shallower than the steady depth.
* :func:`predict_buckets` predicts another bucket list from one profile: each bucket's
  graphs and executables as profiled, the pool from a model of reuse: the largest bucket's
  working set (scaled by the eager peak transient when the list's largest bucket is not the
  profile's); in per-bucket mode the outputs of the smaller buckets filling the space the
  largest one freed before the pool grows (that capacity read from the profile); and, where
  the largest bucket's output stays in the pool, the one-off growth of the bucket captured
  right after it (:func:`_second_bucket_growth`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from bcgprof import dtypes
from bcgprof.errors import BcgprofError
from bcgprof.fit import Fit, least_squares
from bcgprof.options import mode_index
from bcgprof.report import BucketRecord, Report

LABEL = "predicted, not measured"
SEGMENT_ROUND = 2 << 20  # the allocator's large segments come in 2 MiB steps, and so does NVML's count
STEADY_LAYERS = 4  # from this depth on the graph pool's rows equal the full model's (measured on three models)


class PredictionError(BcgprofError):
    """Inputs that cannot support a prediction (exit 2)."""


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


@dataclass
class ModePrediction:
    mode: str
    device_used_bytes: int
    pool_bytes: int
    non_torch_bytes: int
    low_bytes: int
    high_bytes: int
    buckets: list[BucketPrediction] = field(default_factory=list)


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


def predict_layers(reports: Sequence[Report], layers: Optional[int] = None) -> Prediction:
    """Every mode's totals and every bucket's row at ``layers`` (default: the model's full depth)."""
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
    if len(set(counts)) < 2:
        raise PredictionError(f"all reports have {counts[0]} layers; pass captures at two or more layer counts")
    if len(set(counts)) != len(counts):
        raise PredictionError("two reports have the same layer count; pass one report per layer count")
    target = layers or _full_depth(first)
    if target < 1:
        raise PredictionError(f"--layers must be at least 1, got {target}")
    common = [m for m in first.modes() if all(_rows(r, m) for r in reports)]
    if not common:
        raise PredictionError("the reports share no mode")
    order = sorted(range(len(reports)), key=lambda i: counts[i])
    deepest, next_deepest = order[-1], order[-2]
    notes = [f"graph pool and torch memory outside it: from the {counts[deepest]}-layer capture (the pool is one "
             f"layer's working set: from {STEADY_LAYERS} layers on it does not change with depth)"]
    if counts[deepest] < STEADY_LAYERS:
        notes.append(f"the deepest capture has {counts[deepest]} layers, fewer than {STEADY_LAYERS}: its pool may "
                     "not be the full model's; the band includes its change from the next count")
    modes = []
    rows_of = {mode: [_rows(r, mode) for r in reports] for mode in common}  # mode -> each report's rows
    steps = {}  # mode -> per-report executable bytes per later bucket, and their standard errors
    for mode, per_report in rows_of.items():
        buckets = [row.bucket for row in per_report[0]]
        if any([row.bucket for row in rows] != buckets for rows in per_report):
            raise PredictionError(f"mode {mode}: the reports captured different buckets")
        if len(buckets) > 1:
            steps[mode] = [_staircase(rows[1:]) for rows in per_report]
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
        modes.append(_mode(mode, predicted, 0.0, band))
    notes.append(_per_layer_note(reports, counts, common[0], steps.get(common[0])))
    return Prediction(kind="layers", model=first.run.model, gpu=first.run.gpu_name, layers=target,
                      bucket_list=list(first.run.buckets), modes=modes, basis=[str(r.path) for r in reports],
                      notes=notes)


def _staircase(rows: Sequence[BucketRecord]) -> tuple[float, float]:
    """Bytes of executables per bucket over ``rows`` (one mode's later buckets, in capture order), and the
    standard error: the least-squares slope of their cumulative non-torch bytes against the bucket count.
    NVML counts in 2 MiB steps, so the slope of the whole staircase is far finer than any one step."""
    totals, run = [], 0
    for r in rows:
        run += r.non_torch_delta_bytes
        totals.append(float(run))
    n = len(totals)
    if n < 3:  # too few points for a slope with an error: the mean, known to within one step
        return (totals[-1] / n if n else 0.0), float(SEGMENT_ROUND) / max(n, 1)
    line = _line(range(1, n + 1), totals)
    return line.coef[1], line.std_errors[1]


def _per_layer_note(reports: Sequence[Report], counts: list[int], mode: str,
                    steps: Optional[list[tuple[float, float]]]) -> str:
    """What each layer adds to one bucket: graphs, kernel nodes and executable bytes."""
    lo, hi = counts.index(min(counts)), counts.index(max(counts))
    span = counts[hi] - counts[lo]
    pairs = list(zip(_rows(reports[lo], mode), _rows(reports[hi], mode)))
    graphs = sorted({(high.segments - low.segments) / span for low, high in pairs})
    nodes = sorted({((high.graph_nodes or 0) - (low.graph_nodes or 0)) / span for low, high in pairs})

    def spread(v: list[float]) -> str:
        return f"{v[0]:.0f}" if len(v) == 1 else f"{v[0]:.0f} to {v[-1]:.0f}"

    text = (f"each layer adds to every bucket ({mode}): {spread(graphs)} graph(s), {spread(nodes)} kernel nodes "
            "(by the bucket's kernels)")
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
    raise PredictionError(f"the full depth of {report.run.model!r} is unknown here; pass --layers N")


def _mode(mode: str, rows: list[BucketPrediction], rms: float, misfit: float, upside: int = 0) -> ModePrediction:
    """Totals of a mode's predicted rows; the band is twice the noise over the rows plus the misfit, and
    ``upside`` widens only its top (a growth the model cannot rule out)."""
    band = int(math.ceil(2.0 * rms * math.sqrt(len(rows)) + misfit))
    used = sum(r.device_used_delta_bytes for r in rows)
    return ModePrediction(mode=mode, device_used_bytes=used, pool_bytes=rows[-1].pool_bytes if rows else 0,
                          non_torch_bytes=sum(r.non_torch_delta_bytes for r in rows), low_bytes=used - band,
                          high_bytes=used + band + upside, buckets=rows)


# ---------------------------------------------------------------- bucket lists


def _round_up(n: int, step: int = SEGMENT_ROUND) -> int:
    return -(-n // step) * step


@dataclass
class BucketProfile:
    """What one report says about each bucket and about reuse in the pool."""

    largest: int
    floor_pool: int  # the largest bucket's first-capture pool (working set + its output)
    transient: dict[int, int]  # bucket -> eager peak transient (working set), any mode
    output: dict[int, int]  # bucket -> output bytes
    rows: dict[str, dict[int, BucketRecord]]  # mode -> bucket -> row
    capacity: Optional[int]  # per-bucket: output bytes the freed space took before the pool grew
    capacity_is_bound: bool  # True: the profile never filled it (a lower bound)
    cascade: Optional[tuple[int, int]] = None  # (bucket, pool growth) of the profile's second capture
    grows_from: float = math.inf  # working-set ratio to the largest from which a second capture grows the pool
    maybe_from: float = math.inf  # ratio from which it may (the band's top includes it)
    runner_up: int = 0  # bytes of the second-largest block live at the largest bucket's pool peak


def bucket_profile(report: Report) -> BucketProfile:
    _check_usable(report)
    rows = {m: {r.bucket: r for r in _rows(report, m)} for m in report.modes()}
    largest = max(report.run.buckets)
    first = next((rs[largest] for m, rs in rows.items() if largest in rs and rs[largest].order == 0), None)
    if first is None:
        raise PredictionError(f"{report.path} has no mode that captured its largest bucket first")
    transient: dict[int, int] = {}
    output: dict[int, int] = {}
    for rs in rows.values():
        for b, r in rs.items():
            transient[b] = max(transient.get(b, 0), r.peak_transient_bytes)
    per_bucket = rows.get("per-bucket", {})
    width = dtypes.dtype_bytes(report.run.dtype)  # an output row: hidden size x the model's dtype
    for b in report.run.buckets:
        row = per_bucket.get(b)
        output[b] = row.retained_output_bytes if row is not None else b * report.run.hidden_size * width
    # The second capture, whose largest tensors must fit beside the kept largest output: when they do
    # not, the pool grows by about its largest tensor (a cascade), not by its output.
    kept = [rows[m] for m in ("shared-largest", "per-bucket") if m in rows]
    second = next((r for rs in kept for r in rs.values() if r.order == 1), None)
    top = max(transient.get(largest, 0), 1)
    cascade, cascade_from = None, math.inf
    if second is not None and second.pool_delta_bytes > 0:
        cascade = (second.bucket, second.pool_delta_bytes)
        grew = [r.bucket for rs in kept for r in rs.values()
                if r.order > 0 and r.pool_delta_bytes >= second.pool_delta_bytes // 2]
        cascade_from = min(transient.get(b, 0) / top for b in grew)
    # Below ``cascade_from`` the profile shows no growth, but the layout may still not hold a second
    # capture: its runner-up tensor (the second-largest block live at the floor's peak, scaled) must fit
    # in that block's space beside one more output-sized tensor, which the kept output displaced.
    blocks = sorted((s.bytes // s.blocks for s in report.sites
                     if s.kind == "site" and s.bucket == largest and s.blocks > 0 for _ in range(s.blocks)),
                    reverse=True)
    runner_up = blocks[1] if len(blocks) > 1 else 0
    layout_from = runner_up / (runner_up + output[largest]) if runner_up else math.inf
    if cascade is not None:  # it grew: from the layout's bound, or from where it was seen, whichever is lower
        grows_from, maybe_from = min(layout_from, cascade_from), math.inf
    elif second is not None and transient.get(second.bucket, 0) / top >= layout_from:
        grows_from = maybe_from = math.inf  # above the bound and it did not grow: the bound does not apply
    else:  # no evidence either way: a growth from the bound on is possible, not predicted
        grows_from, maybe_from = math.inf, layout_from
    capacity, bound = None, True
    if per_bucket:
        later = [r for r in per_bucket.values() if r.order > 0]
        outputs = sum(r.retained_output_bytes for r in later)
        growth = sum(r.pool_delta_bytes for r in later if r.order > 1 or cascade is None)
        capacity, bound = outputs - growth, growth == 0
    return BucketProfile(largest, first.pool_delta_bytes, transient, output, rows, capacity, bound, cascade,
                    grows_from, maybe_from, runner_up)


def _working_set(p: BucketProfile, bucket: int) -> int:
    """The first capture's pool for ``bucket`` as the largest of a list: the profile's own when it is the
    profile's largest, else scaled by the eager peak transient."""
    if bucket == p.largest:
        return p.floor_pool
    ratio = p.transient.get(bucket, 0) / max(p.transient.get(p.largest, 1), 1)
    return _round_up(int(p.floor_pool * ratio))


def predict_buckets(report: Report, buckets: Sequence[int], modes: Optional[Sequence[str]] = None, *,
                    profile: Optional[BucketProfile] = None) -> Prediction:
    """Each mode's cost for another bucket list drawn from the profiled buckets. ``profile``: the report's
    :func:`bucket_profile`, when the caller predicts many lists from one report."""
    p = profile or bucket_profile(report)
    wanted = sorted(set(int(b) for b in buckets), reverse=True)
    missing = [b for b in wanted if b not in p.output]
    if missing:
        raise PredictionError(f"bucket{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                              f"{'were' if len(missing) > 1 else 'was'} not profiled in {report.path}; predict a "
                              "list drawn from the profiled buckets")
    if report.run.order != "largest-first":
        raise PredictionError("bucket-list predictions model largest-first capture; profile with the default order")
    notes = []
    if p.capacity is not None and p.capacity_is_bound:
        notes.append("the profile's per-bucket outputs all fitted in freed pool space, so the capacity of that space "
                     "is a lower bound: larger lists may grow the pool sooner than predicted")
    top = wanted[0]
    scale = _working_set(p, top) / p.floor_pool if p.floor_pool else 1.0
    if top != p.largest:
        notes.append(f"the list's largest bucket ({top}) is not the profile's ({p.largest}): its working set is "
                     "scaled from the profile's by the eager peak transient")
    out = []
    for mode in [m for m in (modes or report.modes()) if m in p.rows]:
        rows = p.rows[mode]
        chosen = wanted[:1] if mode == "floor" else wanted
        first = rows.get(p.largest)
        if first is None:
            continue
        predicted, pool, filled, grown, upside = [], 0, 0, 0, 0
        room = int((p.capacity or 0) * scale)
        for order, bucket in enumerate(chosen):
            if order == 0:  # the largest bucket: its working set, and the mode's one-off costs
                pool_delta = first.pool_delta_bytes if top == p.largest else _round_up(int(first.pool_delta_bytes
                                                                                        * scale))
                outside = _outside_first(mode, first, p, top)
                non_torch = first.non_torch_delta_bytes
                retained = p.output[top]
                src = first
            else:
                src = rows[bucket]
                pool_delta = 0
                if mode in ("per-bucket", "shared-largest") and order == 1:  # beside the kept largest output
                    pool_delta, upside = _second_bucket_growth(p, bucket, top)
                if mode == "per-bucket":  # outputs fill the space the largest bucket freed, then grow the pool
                    filled += p.output[bucket]
                    need = _round_up(max(0, filled - room))
                    pool_delta, grown = pool_delta + need - grown, need
                outside = src.torch_reserved_delta_bytes - src.pool_delta_bytes
                non_torch = src.non_torch_delta_bytes
                retained = p.output[bucket] if mode == "per-bucket" else 0
            pool += pool_delta
            predicted.append(BucketPrediction(
                mode=mode, bucket=bucket, order=order, segments=src.segments, graph_nodes=src.graph_nodes,
                pool_bytes=pool, pool_delta_bytes=pool_delta, outside_pool_delta_bytes=outside,
                non_torch_delta_bytes=non_torch, device_used_delta_bytes=pool_delta + outside + non_torch,
                retained_output_bytes=retained))
        out.append(_mode(mode, predicted, _nvml_noise(rows), 0.0, upside))
        if upside:
            notes.append(f"{mode}: bucket {chosen[1]}, captured right after the largest, may grow the pool by "
                         f"{upside / (1 << 20):.0f} MiB (counted in the band's top, not in the prediction)")
    out.sort(key=lambda m: mode_index(m.mode))
    return Prediction(kind="buckets", model=report.run.model, gpu=report.run.gpu_name, layers=int(report.run.layers),
                      bucket_list=sorted(wanted), modes=out, basis=[str(report.path)], notes=notes)


def _second_bucket_growth(p: BucketProfile, bucket: int, top: int) -> tuple[int, int]:
    """(growth, possible growth) of the pool for the bucket captured right after the largest, whose
    tensors must fit in the space left beside the kept largest output.

    When they do not, one tensor finds no free block and the pool grows by about the size of the
    runner-up tensor (the second-largest block live at the floor's peak; measured: gpt-oss-20b's MoE
    ``cache2``, Llama's MLP activation). With working-set ratio ``r`` to the list's largest, that tensor
    (runner-up x r) must fit in the runner-up's block beside one output-sized tensor (output x r) that
    the kept output displaced: it does not from r = runner-up / (runner-up + output) on. That bound
    predicts the growth when the profile's own second capture grew the pool (the growth is then the
    profile's, scaled); when the profile's second capture was above the bound and did not grow, no
    growth is predicted; with no evidence either way the growth is possible, and counted only in the
    band's top.
    """
    ratio = p.transient.get(bucket, 0) / max(p.transient.get(top, 1), 1)
    if p.cascade is not None:
        second, growth = p.cascade
        scaled = _round_up(int(growth * p.transient.get(bucket, 0) / max(p.transient.get(second, 1), 1)))
    else:
        scaled = _round_up(int(p.runner_up * p.transient.get(bucket, 0) / max(p.transient.get(p.largest, 1), 1)))
    if ratio >= p.grows_from:
        return scaled, 0
    if ratio >= p.maybe_from and scaled:
        return 0, scaled
    return 0, 0


def _outside_first(mode: str, first: BucketRecord, p: BucketProfile, top: int) -> int:
    """Torch memory outside the pool taken by the first bucket: the shared buffer in shared mode."""
    measured = first.torch_reserved_delta_bytes - first.pool_delta_bytes
    if mode == "shared" and top != p.largest:
        # the buffer is sized for the list's largest bucket
        return measured - _round_up(p.output[p.largest]) + _round_up(p.output[top])
    return measured


def _nvml_noise(rows: dict[int, BucketRecord]) -> float:
    """Spread of the non-torch deltas of a mode's later buckets (NVML's 2 MiB steps and driver noise)."""
    later = [r.non_torch_delta_bytes for r in rows.values() if r.order > 0]
    if len(later) < 2:
        return float(SEGMENT_ROUND)
    mean = sum(later) / len(later)
    return (sum((v - mean) ** 2 for v in later) / (len(later) - 1)) ** 0.5


def prediction_json(pred: Prediction) -> dict:
    """The JSON contract of `bcgprof predict -f json`."""
    return {
        "kind": pred.kind, "label": pred.label, "model": pred.model, "gpu": pred.gpu, "layers": pred.layers,
        "buckets": pred.bucket_list, "basis": pred.basis, "notes": pred.notes,
        "modes": [{"mode": m.mode, "device_used_bytes": m.device_used_bytes, "pool_bytes": m.pool_bytes,
                   "non_torch_bytes": m.non_torch_bytes, "low_bytes": m.low_bytes, "high_bytes": m.high_bytes,
                   "rows": [{"bucket": r.bucket, "order": r.order, "segments": r.segments,
                             "graph_nodes": r.graph_nodes, "pool_bytes": r.pool_bytes,
                             "pool_delta_bytes": r.pool_delta_bytes,
                             "outside_pool_delta_bytes": r.outside_pool_delta_bytes,
                             "non_torch_delta_bytes": r.non_torch_delta_bytes,
                             "device_used_delta_bytes": r.device_used_delta_bytes,
                             "retained_output_bytes": r.retained_output_bytes} for r in m.buckets]}
                  for m in pred.modes],
    }
