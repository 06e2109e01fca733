"""The evidence behind prediction bands, built from a directory of committed reports
(``benchmarks/calibrate_bands.py`` writes it to ``bcgprof/analysis/predict/bands.json``;
:mod:`bcgprof.analysis.predict.bands` reads it).

* **Held-out lists.** For every traced profile (a complete single-GPU report, captured largest
  first, with allocator traces), every other report of the same configuration
  (:func:`bcgprof.analysis.predict.bands.run_key`) whose bucket list differs from the profile's and
  is drawn from it is predicted from the profile, mode by mode, and its measured device-used total
  kept beside the prediction. A list within the profile's range with buckets it lacks counts too
  (they are interpolated; the residual records how many). Where the two segment placements replay
  different pools, the band spans both, so the residual is taken from the nearer one. A repeat
  capture of the profile's own list is not held out.
* **Layer checks.** For every directory holding captures of one configuration at two or more
  layer counts, the layer prediction at each deeper depth captured (full depth, and intermediate
  depths such as 8 and 16 layers), mode by mode, against the first (by name) capture of that
  configuration and depth with the same bucket list.

Reports that cannot serve (incomplete, failed buckets, tensor-parallel, another order, unreadable)
are passed over; :func:`build` returns them with the reason. Deterministic: the same reports give
the same file. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from bcgprof.analysis.predict.bands import (
    Calibration,
    LayerCheck,
    ListEvidence,
    Residual,
    leave_one_out,
    run_key,
)
from bcgprof.analysis.predict.layers import predict_layers
from bcgprof.analysis.predict.lists import (
    BucketProfile,
    PredictionError,
    bucket_profile,
    predict_buckets,
)
from bcgprof.analysis.predict.needs_free import measured_needs_free_bytes
from bcgprof.errors import BcgprofError
from bcgprof.report import Report, RunInfo, read_report
from bcgprof.report.traces import trace_name
from bcgprof.vocab import BucketStatus, Order, RunStatus, Weights

LAYER_KEY = (
    "config_hash",
    "gpu_name",
    "driver",
    "torch_version",
    "dtype",
    "phase",
    "graph",
    "weights",
    "order",
)  # and the capture's choices (RunInfo.capture_choices)


def _name(report: Report, root: Path) -> str:
    return Path(report.path).resolve().relative_to(root.resolve().parent).as_posix()


def _usable(report: Report) -> str:
    """Why ``report`` cannot serve as evidence ('' when it can)."""
    run = report.run
    if run.status != RunStatus.COMPLETE:
        return f"status {run.status}"
    if any(r.status != BucketStatus.OK for r in report.buckets):
        return "failed buckets"
    if run.tp != 1:
        return "tensor-parallel"
    if run.order != Order.LARGEST_FIRST:
        return f"captured {run.order}"
    return ""


def _read_all(root: Path) -> tuple[list[Report], list[tuple[str, str]]]:
    reports, skipped = [], []
    for run_json in sorted(Path(root).rglob("run.json")):
        try:
            report = read_report(run_json.parent)
        except BcgprofError as e:
            skipped.append((run_json.parent.as_posix(), str(e)))
            continue
        why = _usable(report)
        if why:
            skipped.append((run_json.parent.as_posix(), why))
        else:
            reports.append(report)
    return reports, skipped


def _has_traces(report: Report) -> bool:
    return any((Path(report.path) / trace_name(m)).exists() for m in report.modes())


def profiles_of(
    reports: Sequence[Report], root: Path
) -> tuple[list[Report], list[tuple[str, str]]]:
    """The traced reports that are profiles, and those passed over (path, why): of traced reports
    of one configuration and one bucket list, one only, the one holding the most modes (then by
    name). A capture repeats to the byte, so a second capture of the same list (a pair's phase
    captured alone beside the one-phase reference, say) predicts every held-out list exactly as the
    first does: counted twice, its residuals would be evidence only once."""

    def same(r: Report) -> tuple:
        return (tuple(sorted(run_key(r.run).items())), tuple(r.run.buckets))

    traced = [r for r in reports if _has_traces(r)]  # each report's trace files looked up once
    kept: dict[tuple, Report] = {}
    for report in sorted(traced, key=lambda r: (-len(r.modes()), _name(r, root))):
        kept.setdefault(same(report), report)
    chosen = {id(r) for r in kept.values()}
    repeats = [
        (
            Path(r.path).as_posix(),
            "repeats the configuration and bucket list of "
            f"{_name(kept[same(r)], root)}, the profile of that list",
        )
        for r in traced
        if id(r) not in chosen
    ]
    return [r for r in traced if id(r) in chosen], repeats


def _mode_rows(report: Report, mode: str) -> list:
    return sorted(
        (r for r in report.buckets if r.mode == mode and r.rank == 0), key=lambda r: r.order
    )


def _total(report: Report, mode: str) -> int:
    # summary ranks are text ("max", "sum")
    return next(
        s.device_used_bytes for s in report.summary if s.mode == mode and str(s.rank) == "0"
    )


def held_out(
    profile: Report,
    reports: Sequence[Report],
    root: Path,
    prepared: Optional[dict[str, BucketProfile]] = None,
) -> ListEvidence:
    """The residuals of every held-out list of ``profile``'s configuration. ``prepared``: where the
    prepared profile is kept, by report name, so that a caller predicting the same lists again
    replays from its cache."""
    name = _name(profile, root)
    key, profiled = run_key(profile.run), set(profile.run.buckets)
    lists = [
        report
        for report in sorted(reports, key=lambda r: _name(r, root))
        if report.path != profile.path
        and run_key(report.run) == key
        and report.run.buckets != profile.run.buckets
        and min(profiled) <= min(report.run.buckets) <= max(report.run.buckets) <= max(profiled)
    ]
    if not lists:  # nothing held out: the profile is not replayed
        return ListEvidence(key, profile.run.model, profile.run.gpu_name, name, ())
    prepared = {} if prepared is None else prepared
    if name not in prepared:
        prepared[name] = bucket_profile(profile)
    p = prepared[name]
    residuals: list[Residual] = []
    for report in lists:
        for mode in report.modes():
            if mode not in p.rows:
                continue
            rows = _mode_rows(report, mode)
            try:
                pred = predict_buckets(profile, [r.bucket for r in rows], [mode], profile=p).mode(
                    mode
                )
            except PredictionError:
                continue  # a bucket that cannot be interpolated from this profile
            if pred is None:
                continue
            measured, point = _total(report, mode), pred.device_used_bytes
            # the band spans both placements: the residual is
            if pred.other_placement_pool_bytes is not None:
                # what lies beyond the nearer
                other = point + pred.other_placement_pool_bytes - pred.pool_bytes
                point = min((point, other), key=lambda v: abs(measured - v))
            interpolated = sum(1 for r in pred.buckets if r.interpolated_from)
            residuals.append(
                Residual(_name(report, root), mode, len(rows), point, measured, interpolated)
            )
    return ListEvidence(key, profile.run.model, profile.run.gpu_name, name, tuple(residuals))


# One layer's weights used by every layer capture what distinct dummy weights capture (shapes, not
# values, decide what a capture allocates; docs/h200.md has the zero-tolerance check), so a
# full-depth
# capture with one-layer weights checks a layer prediction made from captures with distinct ones.
_SAME_CAPTURE = {"weights": {Weights.ONE_LAYER.value: Weights.DUMMY.value}}


def _layer_key(run: RunInfo) -> tuple:
    values = (str(getattr(run, f)) for f in LAYER_KEY)
    return tuple(_SAME_CAPTURE.get(f, {}).get(v, v) for f, v in zip(LAYER_KEY, values)) + (
        tuple(sorted(run.capture_choices().items())),
        tuple(run.buckets),
    )


def layer_checks(reports: Sequence[Report], root: Path) -> list[LayerCheck]:
    """Each layer set's prediction at every deeper depth captured of its configuration (the full
    depth, and intermediate depths where they were captured) against that capture."""
    sets: dict[tuple, list[Report]] = {}
    for r in reports:
        sets.setdefault((Path(r.path).parent.as_posix(), _layer_key(r.run)), []).append(r)
    checks = []
    for (_, key), members in sorted(sets.items(), key=lambda kv: kv[0][0]):
        if len({int(m.run.layers) for m in members}) < 2:
            continue
        members = sorted(members, key=lambda m: int(m.run.layers))
        deepest = max(int(m.run.layers) for m in members)
        # each deeper depth captured: the first capture of it by name
        deeper: dict[int, Report] = {}
        for r in sorted(
            (r for r in reports if _layer_key(r.run) == key and int(r.run.layers) > deepest),
            key=lambda r: _name(r, root),
        ):
            deeper.setdefault(int(r.run.layers), r)
        for _depth, target in sorted(deeper.items()):
            checks.extend(_layer_check(members, target, root))
    return checks


def _layer_check(members: list[Report], target: Report, root: Path) -> list[LayerCheck]:
    """The layer set ``members`` predicted at ``target``'s depth, mode by mode, against
    ``target``."""
    checks = []
    pred = predict_layers(members, int(target.run.layers))
    for m in pred.modes:
        if not any(s.mode == m.mode for s in target.summary):
            continue
        checks.append(
            LayerCheck(
                model=target.run.model,
                gpu=target.run.gpu_name,
                config_hash=target.run.config_hash,
                inputs=tuple(_name(r, root) for r in members),
                full=_name(target, root),
                mode=m.mode,
                layers=int(target.run.layers),
                predicted_bytes=m.device_used_bytes,
                measured_bytes=_total(target, m.mode),
                low_bytes=m.low_bytes,
                high_bytes=m.high_bytes,
                predicted_needs_free_bytes=m.needs_free.needs_free_bytes if m.needs_free else None,
                measured_needs_free_bytes=measured_needs_free_bytes(
                    [r for r in target.buckets if r.mode == m.mode and r.rank == 0]
                ),
            )
        )
    return checks


def build(
    root: Path, prepared: Optional[dict[str, BucketProfile]] = None
) -> tuple[Calibration, list[tuple[str, str]]]:
    """The calibration from every report under ``root``, and the reports passed over (path, why).
    ``prepared``: as for :func:`held_out`."""
    root = Path(root)
    reports, skipped = _read_all(root)
    profiles, repeats = profiles_of(reports, root)
    skipped += repeats
    lists = tuple(
        e
        for e in (
            held_out(p, reports, root, prepared)
            for p in sorted(profiles, key=lambda r: _name(r, root))
        )
        if e.residuals
    )
    cal = Calibration(lists=lists, layers=tuple(layer_checks(reports, root)))
    runs = {_name(p, root): p.run for p in profiles}
    checks = leave_one_out(cal, runs)
    loo = {"inside": sum(c.inside for c in checks), "of": len(checks)}
    return Calibration(cal.lists, cal.layers, loo), skipped
