"""`bcgprof advise`: the bucket list that wastes the least compute on padding within a memory
budget.

A prefill batch of ``t`` tokens runs in the smallest captured bucket ``b >= t`` and
computes ``b - t`` tokens for nothing; a batch longer than the largest bucket is cut into
chunks of the largest bucket, and only its remainder pads. Given the distribution of
prefill sizes (observed token counts, or uniform over the profiled range), the advisor
picks, among the profiled buckets, the list with the least expected padding whose
predicted cost (:func:`bcgprof.analysis.predict.lists.predict_buckets`) fits the budget even at the
top of its error band. The largest profiled bucket is always kept: it is the chunk size.

With ``free`` (``advise --free SIZE``) the list must also capture with SIZE free on the device
when its first warm-up begins, as a server's start-up has it: a capture needs more than it
keeps, since each bucket's eager warm-up leaves its blocks cached while the pool grows
(:mod:`bcgprof.analysis.predict.needs_free`). A candidate that fits the budget is kept only if its
replayed need (the largest over its buckets of what earlier buckets kept plus the bucket's
warm-up cache, pool growth and executables) is within SIZE; that reads the prediction the
budget check made, so it adds no replay, but the search then goes on to more padded lists.
The trade-off curve carries the same constraint.

**Expected padding**, wherever bcgprof prints it, is padded tokens over requested tokens (full
chunks included): :mod:`bcgprof.analysis.predict.padding` defines it and reads the request lengths.

The search over candidate lists is :mod:`bcgprof.analysis.predict.search`; its cost is given there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bcgprof.analysis.predict import kept_advice
from bcgprof.analysis.predict.bands import TOO_WIDE
from bcgprof.analysis.predict.lists import (
    PredictionError,
    bucket_profile,
    list_band,
    predict_buckets,
)
from bcgprof.analysis.predict.padding import length_weights, padding_of, padding_pct, read_lengths
from bcgprof.analysis.predict.prediction import ModePrediction
from bcgprof.analysis.predict.programme import (
    brute_force,
    optimise,
    pareto_lists,
)
from bcgprof.analysis.predict.search import BAND_LENGTHS, Search
from bcgprof.analysis.predict.sources import BucketSources
from bcgprof.errors import AdviceError
from bcgprof.report import Report
from bcgprof.vocab import ListMode, Mode

MIB = 1 << 20
# what Advice.work counts
WORK = (
    "predictions",
    "lists_checked",
    "bucket_replays",
    "events_replayed",
    "buckets_looked_up",
    "candidate_lists",
    "programme_cells",
)
ADVISE_MODES = (ListMode.SHARED_LARGEST.value, ListMode.SHARED.value, ListMode.PER_BUCKET.value)


@dataclass
class Advice:
    mode: str
    budget_bytes: int
    buckets: list[int]
    predicted_bytes: int
    expected_padding_pct: float
    high_bytes: int  # the top of the prediction's band: this is what must fit the budget
    # (budget bytes, padding %, buckets)
    curve: list[tuple[int, float, int]] = field(default_factory=list)
    lengths_source: str = ""
    notes: list[str] = field(default_factory=list)
    low_bytes: int = 0  # the bottom of the prediction's band
    exact: bool = False  # the list's pool replayed from every event of its buckets
    band_source: str = ""  # what the band was derived from (bcgprof.analysis.predict.bands)
    # what the search did: predictions, replays... (not in the JSON)
    work: dict = field(default_factory=dict)
    # the free memory the list needs when its first warm-up begins
    needs_free_bytes: Optional[int] = None
    free_bytes: Optional[int] = None  # --free: the second constraint (None: not asked)

    @property
    def spec(self) -> str:
        return ",".join(str(b) for b in self.buckets)

    @property
    def margin_bytes(self) -> int:
        """The budget left above the top of the band (never negative for a chosen list)."""
        return self.budget_bytes - self.high_bytes

    @property
    def free_margin_bytes(self) -> Optional[int]:
        """With --free: the free memory left above what the list needs (never negative for a chosen
        list)."""
        if self.free_bytes is None or self.needs_free_bytes is None:
            return None
        return self.free_bytes - self.needs_free_bytes


def advise(
    report: Report,
    budget: int,
    *,
    mode: str = ListMode.SHARED_LARGEST.value,
    lengths: Optional[Sequence[int]] = None,
    curve_points: int = 12,
    free: Optional[int] = None,
) -> Advice:
    """The bucket list with the least expected padding whose predicted ``mode`` cost fits ``budget``
    bytes.

    ``free``: the free memory (NVML) when the first bucket's warm-up begins, as a server start-up
    has it; the list must also capture with that much free
    (:attr:`bcgprof.analysis.predict.needs_free.NeedsFree.needs_free_bytes`:
    the warm-ups' cached blocks and the pool's growth meet at each bucket's peak). Every candidate
    list keeps the profile's largest bucket, so its need is replayed, not bounded."""
    if mode not in ADVISE_MODES:
        raise AdviceError(f"advise supports the modes {', '.join(ADVISE_MODES)}, not {mode!r}")
    if mode not in report.modes():
        held = [m for m in ADVISE_MODES if m in report.modes()]
        instead = f"pass --mode {' or '.join(held)}, the modes it holds, or " if held else ""
        raise AdviceError(
            f"{report.path} has no {mode} rows to predict from; {instead}profile with --modes "
            f"including {mode}"
        )
    candidates = sorted(report.run.buckets)
    weights, requested_tokens, source = length_weights(candidates, lengths)
    profile = bucket_profile(report)  # read once: every list below is predicted from it
    sources = profile.replayer.bucket_sources
    key = None
    if sources.has(mode):  # the mode's trace read and checked (or its kept verdict looked up)
        key = kept_advice.advice_key(report, sources, [mode, budget, free, curve_points], weights)
        found = kept_advice.recall(key, _near(sources, mode))
        if found is not None:  # the same question on the same report: its answer
            work = dict.fromkeys(WORK, 0)
            return Advice(mode=mode, budget_bytes=budget, free_bytes=free, work=work, **found)
    predictions: dict[tuple[int, ...], ModePrediction] = {}

    def predicted(buckets: Sequence[int]) -> ModePrediction:
        key = tuple(sorted(buckets))
        found = predictions.get(key)
        if found is None:
            found = predict_buckets(report, buckets, [mode], profile=profile).mode(mode)
            assert found is not None  # the mode has rows (checked above)
            predictions[key] = found
        return found

    setup = [candidates, candidates[-1:], *([b, candidates[-1]] for b in candidates[:-1])]
    # kept by an earlier advise on these traces
    recalled = profile.replayer.recall_replays(mode, setup)
    whole = predicted(candidates)
    alone = predicted([candidates[-1]])
    fixed = math.ceil(alone.device_used_bytes / MIB)
    if fixed > budget // MIB:
        raise AdviceError(
            f"the largest bucket alone is predicted at {alone.device_used_bytes / MIB:.0f} MiB in "
            f"{mode} "
            f"mode, above the budget of {budget / MIB:.0f} MiB; raise --budget or profile a "
            "smaller "
            "largest bucket"
        )
    if free is not None:
        if alone.needs_free is None:
            raise AdviceError(
                f"{report.path} cannot say what free memory a capture needs (its allocator traces "
                "lack "
                "the warm-ups); re-capture it with this version of bcgprof to use --free"
            )
        if alone.needs_free.needs_free_bytes > free:
            raise AdviceError(
                f"the largest bucket alone needs {alone.needs_free.needs_free_bytes / MIB:.0f} MiB "
                "free in "
                f"{mode} mode, more than --free {free / MIB:.0f} MiB; free more memory or profile "
                "a "
                "smaller largest bucket"
            )
    later = {r.bucket: r for r in whole.buckets if r.order > 0}
    # the pool after a list's two largest buckets, which no later bucket can shrink: part of each
    # list's bound
    pair_pool = {b: predicted([b, candidates[-1]]).pool_bytes for b in candidates[:-1]}
    if not recalled:  # the setup's replays do not depend on the budget: the next advise takes them
        profile.replayer.keep_replays(mode, setup)
    pools = [candidates]
    if mode == Mode.SHARED:
        families = [[later[b].device_used_delta_bytes for b in candidates[:-1]]]
    # non-additive: each bucket's executables alone, with its standalone output, and as in the whole
    # list
    else:
        families = [
            [
                later[b].non_torch_delta_bytes + later[b].outside_pool_delta_bytes
                for b in candidates[:-1]
            ],
            [
                max(
                    later[b].device_used_delta_bytes,
                    later[b].non_torch_delta_bytes
                    + later[b].outside_pool_delta_bytes
                    + later[b].retained_output_bytes,
                )
                for b in candidates[:-1]
            ],
            [max(0, later[b].device_used_delta_bytes) for b in candidates[:-1]],
        ]
        # A second bucket that grows the pool beside the kept largest output is a one-off cost no
        # additive
        # model carries: search also among the buckets that, captured second, would not grow it.
        quiet = [
            b
            for b in candidates[:-1]
            if pair_pool[b] - alone.pool_bytes
            <= (later[b].pool_delta_bytes if mode == Mode.PER_BUCKET else 0)
        ]
        if len(quiet) < len(candidates) - 1:
            pools.append(quiet + [candidates[-1]])
    search = Search(
        mode,
        profile,
        predicted,
        weights,
        requested_tokens,
        candidates,
        later,
        alone,
        pair_pool,
        free,
    )
    search.add_lists([(candidates[-1],)])  # the largest bucket alone is always a choice
    # The band grows with the list's length (in proportion, past the longest held-out list), which
    # no additive
    # cost carries: each family is searched again with every bucket charged the band's growth at a
    # few list
    # lengths (its slope there).
    shares = sorted(
        {list_band(profile, mode, k + 1) - list_band(profile, mode, k) for k in BAND_LENGTHS} | {0}
    )
    for family in families:
        cost_of = dict(zip(candidates[:-1], family, strict=True))
        for pool in pools:
            for share in shares:
                costs = [max(0, math.ceil((cost_of[b] + share) / MIB)) for b in pool[:-1]] + [0]
                search.add_programme(pool, costs, search.reach(pool, costs, budget))
    best = search.best_within(budget)  # within the budget even at the top of its band
    if best is None:
        within = f" that captures with {free / MIB:.0f} MiB free" if free is not None else ""
        raise AdviceError(
            f"no list drawn from the profile{within} is predicted within {budget / MIB:.0f} MiB in "
            f"{mode} mode (with its error band); raise --budget" + (" or --free" if free else "")
        )
    best = search.improve(best, budget)
    cost, high, pct, chosen = best
    final = predicted(chosen)  # replayed already: the band's bottom and source
    notes = (
        [
            f"the band ({(final.high_bytes - final.low_bytes) / MIB:.0f} MiB) is {TOO_WIDE}: the "
            "evidence does not "
            "pin this list down (see the band's source)"
        ]
        if final.band_too_wide
        else []
    )
    curve = search.curve(curve_points, budget)
    # the lists replayed, whatever the budget: the next advise on these traces looks them up
    profile.replayer.keep_store(mode)
    work = {
        "predictions": len(predictions),
        "lists_checked": search.replayed,
        "bucket_replays": profile.replayer.bucket_replays,
        "events_replayed": profile.replayer.events_replayed,
        "buckets_looked_up": profile.replayer.memo_hits,
        "candidate_lists": search.size,
        "programme_cells": search.cells,
    }
    advice = Advice(
        mode=mode,
        budget_bytes=budget,
        buckets=chosen,
        predicted_bytes=cost,
        high_bytes=high,
        expected_padding_pct=round(pct, 4),
        curve=curve,
        lengths_source=source,
        notes=notes,
        low_bytes=final.low_bytes,
        exact=final.exact,
        band_source=final.band_source,
        work=work,
        needs_free_bytes=final.needs_free.needs_free_bytes if final.needs_free else None,
        free_bytes=free,
    )
    kept_advice.keep(key, advice, _near(sources, mode))  # for the next advise asked the same
    return advice


def _near(sources: BucketSources, mode: str) -> Optional[Path]:
    """The mode's trace file (the cache is never put inside a report)."""
    source = sources.traces.sources.get(mode)
    found = getattr(source, "path", source)
    return found if isinstance(found, Path) else None


def advice_json(advice: Advice) -> dict:
    """The JSON contract of `bcgprof advise -f json` (plus the curve and notes)."""
    return {
        "buckets": advice.buckets,
        "spec": advice.spec,
        "mode": advice.mode,
        "predicted_bytes": advice.predicted_bytes,
        "predicted_high_bytes": advice.high_bytes,
        "predicted_low_bytes": advice.low_bytes,
        "margin_bytes": advice.margin_bytes,
        "exact": advice.exact,
        "band_source": advice.band_source,
        "expected_padding_pct": advice.expected_padding_pct,
        "needs_free_bytes": advice.needs_free_bytes,
        "free_bytes": advice.free_bytes,
        "free_margin_bytes": advice.free_margin_bytes,
        "budget_bytes": advice.budget_bytes,
        "lengths": advice.lengths_source,
        "label": "predicted, not measured",
        "curve": [
            {"budget_bytes": b, "expected_padding_pct": round(p, 4), "buckets": n}
            for b, p, n in advice.curve
        ],
        "notes": advice.notes,
    }


__all__ = [
    "Advice",
    "AdviceError",
    "PredictionError",
    "advice_json",
    "advise",
    "brute_force",
    "length_weights",
    "optimise",
    "padding_of",
    "padding_pct",
    "pareto_lists",
    "read_lengths",
]
