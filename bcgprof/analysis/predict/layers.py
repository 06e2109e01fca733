"""`bcgprof predict --num-layers`: a capture's cost at another layer count, from reports at a
few layer counts. Pure functions over reports; every figure is a prediction, labelled so.

How capture cost depends on the layer count (evidence: docs/evidence-predict.md): one layer's
working set sets the graph pool, so from :data:`STEADY_LAYERS` layers on its rows stop changing,
except where the segments' address layout, which another depth changes, decides a best-fit tie;
graphs, kernel nodes and the graph executables' driver memory grow by a constant per layer.

:func:`predict_layers` takes the pool rows (and torch memory outside the pool) from the deepest
input, extends graph and node counts along lines in the layer count, and predicts executables
from the slope of each input's NVML staircase (one bucket's executables, far finer than the 2 MiB
steps of the running non-torch total; a line in the layer count). The first bucket's executables
are a later bucket's less what the driver had reserved. The band: twice the propagated slope
error, two NVML steps, the pool's change if the deepest input is under the steady depth, and the
pools its list replays to at random segment addresses
(:mod:`bcgprof.analysis.predict.layout_spread`). Needs free: each bucket's measured peak above what
it kept at the deepest input (its warm-up's cache, the same at any depth) on top of the predicted
kept bytes, banded by the deeper captures committed
(:func:`bcgprof.analysis.predict.bands.layer_needs_free_band`).

Invariant: no mode total below zero, no band without its point. Cost: linear in the reports'
rows, plus ``layout_spread.LAYOUTS`` replays of the deepest input's list per mode, once per trace
(cached).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import Optional

from bcgprof.analysis.predict.bands import layer_band_source, layer_needs_free_band
from bcgprof.analysis.predict.executables import staircase_slope
from bcgprof.analysis.predict.fit import Fit, least_squares
from bcgprof.analysis.predict.layout_spread import NO_TRACE, layout_spread
from bcgprof.analysis.predict.needs_free import (
    layered_needs,
)
from bcgprof.analysis.predict.possible import check_executables
from bcgprof.analysis.predict.prediction import (
    MIB,
    NO_PEAKS,
    SEGMENT_ROUND,
    BucketPrediction,
    Prediction,
    check_usable,
    mode_totals,
    report_rows,
    round_up,
    too_wide_notes,
)
from bcgprof.analysis.predict.side_by_side import large, side_by_side
from bcgprof.errors import BcgprofError, PredictionError
from bcgprof.report import Report
from bcgprof.report.schema import CHOICE_LABELS
from bcgprof.report.traces import trace_name

STEADY_LAYERS = 4  # from this depth on one layer's working set sets the pool
# a layout spread replays its trace many times: one of a trace this large is worth a process
MIN_SPREAD_BYTES = 16 << 10
LAYER_NEEDS_FREE = (
    "each bucket's measured peak above what it kept from the {layers}-layer capture (its eager "
    "warm-up's "
    "cache: one layer's working set, the same at any depth), on top of the predicted kept bytes"
)


def _line(xs: Sequence[float], ys: Sequence[float]) -> Fit:
    """The least-squares line y = a + b x (``coef`` is (a, b); b is 0 when the xs are all equal)."""
    return least_squares([[1.0] * len(xs), [float(x) for x in xs]], ys)


def _at(xs: Sequence[int], ys: Sequence[int], x: int) -> tuple[int, float]:
    """``ys`` as a function of ``xs`` at ``x``: the common value when all agree, else the fitted
    line."""
    if len(set(ys)) == 1:
        return int(ys[0]), 0.0
    line = _line(xs, [float(v) for v in ys])
    return round(line.at((1.0, x))), line.max_misfit


def predict_layers(
    reports: Sequence[Report], layers: Optional[int] = None, free: Optional[int] = None
) -> Prediction:
    """Every mode's totals and every bucket's row at ``layers`` (default: the model's full depth),
    and the free memory each mode needs (with ``free``: whether it fits, else the first bucket that
    runs out)."""
    if len(reports) < 2:
        raise PredictionError(
            "predicting another layer count needs reports at two or more layer counts; "
            "capture with --num-layers 2,4 and pass both with --from"
        )
    for r in reports:
        check_usable(r)
    first = reports[0]
    for r in reports[1:]:
        for name, label in (
            ("config_hash", "models"),
            ("gpu_name", "GPUs"),
            ("buckets", "bucket lists"),
            ("dtype", "dtypes"),
            ("phase", "phases"),
            ("graph", "graph kinds"),
            ("order", "capture orders"),
            ("weights", "weights"),
        ):
            if getattr(r.run, name) != getattr(first.run, name):
                _differ(first, r, label, getattr(first.run, name), getattr(r.run, name))
        mine, theirs = first.run.capture_choices(), r.run.capture_choices()
        for name in mine:
            if mine[name] != theirs[name]:
                _differ(first, r, CHOICE_LABELS[name], mine[name], theirs[name])
    counts = [int(r.run.layers) for r in reports]
    # 0 is run.json's default when the field is absent: no depth to fit a line through
    if min(counts) < 1:
        raise PredictionError(
            f"{reports[counts.index(min(counts))].path} records no layer count (run.json's "
            "layers); predict from reports that `capture --num-layers` wrote"
        )
    if len(set(counts)) < 2:
        raise PredictionError(
            f"all reports have {counts[0]} layers; pass captures at two or more layer counts"
        )
    if len(set(counts)) != len(counts):
        raise PredictionError(
            "two reports have the same layer count; pass one report per layer count"
        )
    target = layers or _full_depth(first)
    if target < 1:
        raise PredictionError(f"--num-layers must be at least 1, got {target}")
    # the pool rows come from another depth: only right once they have settled
    if target < STEADY_LAYERS:
        raise PredictionError(
            f"{target} layers is below {STEADY_LAYERS}, where the graph pool settles "
            "(below it the pool still changes with depth), so it cannot be taken "
            f"from another depth; predict {STEADY_LAYERS} layers or more, or capture "
            f"with --num-layers {target}"
        )
    common = [m for m in first.modes() if all(report_rows(r, m) for r in reports)]
    if not common:
        raise PredictionError("the reports share no mode")
    order = sorted(range(len(reports)), key=lambda i: counts[i])
    deepest, next_deepest = order[-1], order[-2]
    notes = [
        f"graph pool and torch memory outside it: from the {counts[deepest]}-layer capture "
        f"(from {STEADY_LAYERS} layers on one layer's working set sets the pool, but the "
        "segments' address layout, which another depth changes, can move it: the band spans "
        "the pools its trace, where it has one, replays to in random layouts)"
    ]
    if counts[deepest] < STEADY_LAYERS:
        notes.append(
            f"the deepest capture has {counts[deepest]} layers, fewer than {STEADY_LAYERS}: its "
            "pool may "
            "not be the full model's; the band includes its change from the next count"
        )
    modes, laid = [], []  # laid: the modes whose band spans the pool's layouts
    free_band, free_source = layer_needs_free_band()
    # mode -> each report's rows
    rows_of = {mode: [report_rows(r, mode) for r in reports] for mode in common}
    steps = {}  # mode -> per-report executable bytes per later bucket, and their standard errors
    for mode, per_report in rows_of.items():
        buckets = [row.bucket for row in per_report[0]]
        if any([row.bucket for row in rows] != buckets for rows in per_report):
            raise PredictionError(f"mode {mode}: the reports captured different buckets")
        if len(buckets) > 1:
            steps[mode] = [staircase_slope(rows[1:]) for rows in per_report]
    # each mode's layout spread (read in the loop below) worked out side by side
    laid_out = reports[deepest]
    side_by_side(
        [
            partial(layout_spread, laid_out, mode, per_report[deepest])
            for mode, per_report in rows_of.items()
            if large(laid_out.path / trace_name(mode), MIN_SPREAD_BYTES)
        ]
    )
    for mode, per_report in rows_of.items():
        buckets = [row.bucket for row in per_report[0]]
        # Executables (non-torch): every later bucket adds the same graphs, so their NVML total
        # climbs a
        # staircase of 2 MiB steps whose slope is one bucket's executables; that slope is a line in
        # the
        # layer count. The first bucket's executables are a later bucket's, less what the driver had
        # already reserved (the few-layer captures' first buckets show that reserve).
        basis = steps.get(mode) or next(iter(steps.values()), None)
        if basis is None:
            raise PredictionError(
                "the reports have one bucket per mode; predicting executables needs more"
            )
        slopes, errors = [c for c, _ in basis], [e for _, e in basis]
        # the slope at the target depth, its misfit, and its error propagated from each input's
        # slope
        line = _line(counts, slopes)
        each, misfit = line.at((1.0, target)), line.max_misfit
        check_executables(mode, counts, slopes, target, each)
        weights = line.weights_at((1.0, target))
        each_error = math.sqrt(sum((w * e) ** 2 for w, e in zip(weights, errors, strict=True)))
        reserve = max(
            0.0, max(c - rows[0].non_torch_delta_bytes for c, rows in zip(slopes, per_report))
        )
        first_line, _ = _at(counts, [rows[0].non_torch_delta_bytes for rows in per_report], target)
        first_nt = max(first_line, round_up(int(each - reserve)) if each > reserve else 0)
        predicted, pool = [], 0
        for i, bucket in enumerate(buckets):
            rows = [rs[i] for rs in per_report]
            segments, _ = _at(counts, [r.segments for r in rows], target)
            nodes = None
            if all(r.graph_nodes is not None for r in rows):
                # none is None here
                nodes, _ = _at(counts, [r.graph_nodes or 0 for r in rows], target)
            deep = rows[deepest]
            pool_delta = deep.pool_delta_bytes
            outside = deep.torch_reserved_delta_bytes - deep.pool_delta_bytes
            non_torch = first_nt if i == 0 else int(round(each * i) - round(each * (i - 1)))
            pool += pool_delta
            predicted.append(
                BucketPrediction(
                    mode=mode,
                    bucket=bucket,
                    order=i,
                    segments=segments,
                    graph_nodes=nodes,
                    pool_bytes=pool,
                    pool_delta_bytes=pool_delta,
                    outside_pool_delta_bytes=outside,
                    non_torch_delta_bytes=non_torch,
                    device_used_delta_bytes=pool_delta + outside + non_torch,
                    retained_output_bytes=deep.retained_output_bytes,
                )
            )
        unsettled = 0
        if counts[deepest] < STEADY_LAYERS:
            unsettled = abs(
                sum(r.torch_reserved_delta_bytes for r in per_report[deepest])
                - sum(r.torch_reserved_delta_bytes for r in per_report[next_deepest])
            )
        later = len(buckets) - 1
        # the first bucket's reserve is a bound read in 2 MiB steps: two steps either way
        band = 2.0 * later * each_error + later * misfit + 2 * SEGMENT_ROUND + unsettled
        result = mode_totals(mode, predicted, band)
        result.band_source = layer_band_source(first.run)
        # another depth, another layout
        spread = layout_spread(reports[deepest], mode, per_report[deepest])
        if spread is None:
            result.band_source += f"; {NO_TRACE.format(path=reports[deepest].path)}"
        elif spread.below or spread.above:
            result.low_bytes, result.high_bytes = (
                result.low_bytes - spread.below,
                result.high_bytes + spread.above,
            )
            result.band_source += f"; {spread.note(counts[deepest])}"
            laid.append(result)  # widened by the pool's layouts, not by the slopes
        result.needs_free = layered_needs(
            mode,
            predicted,
            per_report[deepest],
            free_band,
            f"{LAYER_NEEDS_FREE.format(layers=counts[deepest])}; band "
            f"±{free_band / MIB:.1f} MiB: {free_source}",
        )
        if free is not None:
            if result.needs_free is None:
                raise PredictionError(NO_PEAKS.format(path=reports[deepest].path))
            result.needs_free.check(free)
        modes.append(result)
    notes.append(_per_layer_note(reports, counts, common[0], steps.get(common[0])))
    notes += too_wide_notes(
        laid,
        ": the graph pool depends on where the driver places its segments (see its band); "
        "capture the full depth to pin it down",
    )
    notes += too_wide_notes(
        [m for m in modes if m not in laid],
        f": the extrapolation from {counts[next_deepest]} and {counts[deepest]} layers to "
        f"{target} multiplies the slopes' error: capture deeper inputs to narrow it",
    )
    return Prediction(
        kind="layers",
        model=first.run.model,
        gpu=first.run.gpu_name,
        layers=target,
        bucket_list=list(first.run.buckets),
        modes=modes,
        basis=[str(r.path) for r in reports],
        notes=notes,
    )


def _differ(first: Report, other: Report, label: str, a: object, b: object) -> None:
    raise PredictionError(
        f"{first.path} and {other.path} differ in {label} ({a!r} vs {b!r}); predict from captures "
        "that differ in the layer count only"
    )


def _per_layer_note(
    reports: Sequence[Report],
    counts: list[int],
    mode: str,
    steps: Optional[list[tuple[float, float]]],
) -> str:
    """What each layer adds to one bucket: graphs, kernel nodes and executable bytes."""
    lo, hi = counts.index(min(counts)), counts.index(max(counts))
    span = counts[hi] - counts[lo]
    pairs = list(zip(report_rows(reports[lo], mode), report_rows(reports[hi], mode)))
    graphs = sorted({(high.segments - low.segments) / span for low, high in pairs})
    counted = [
        (low.graph_nodes, high.graph_nodes)
        for low, high in pairs
        if low.graph_nodes is not None and high.graph_nodes is not None
    ]
    nodes = sorted({(high - low) / span for low, high in counted})

    def spread(v: list[float]) -> str:
        return f"{v[0]:.0f}" if len(v) == 1 else f"{v[0]:.0f} to {v[-1]:.0f}"

    text = f"each layer adds to every bucket ({mode}): {spread(graphs)} graph(s), "
    # node counts need the CUDA bindings; a report captured without them has none to difference
    text += (
        f"{spread(nodes)} kernel nodes (by the bucket's kernels)"
        if len(counted) == len(pairs) and nodes
        else "kernel nodes not recorded"
    )
    if steps:
        per = (steps[hi][0] - steps[lo][0]) / span
        text += (
            f", {per / 1024:.0f} KiB of graph executables (slope of the NVML staircase over "
            "the buckets)"
        )
    return text


def _full_depth(report: Report) -> int:
    try:
        from bcgprof.spec import resolve_model

        spec = resolve_model(report.run.model)
        if spec.config_hash == report.run.config_hash:
            return spec.num_layers
    except BcgprofError:
        pass
    raise PredictionError(
        f"the full depth of {report.run.model!r} is unknown here; pass --num-layers N"
    )
