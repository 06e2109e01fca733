"""`bcgprof advise`: the bucket list that wastes the least compute on padding within a memory budget.

A prefill batch of ``t`` tokens runs in the smallest captured bucket ``b >= t`` and
computes ``b - t`` tokens for nothing; a batch longer than the largest bucket is cut into
chunks of the largest bucket, and only its remainder pads. Given the distribution of
prefill sizes (observed token counts, or uniform over the profiled range), the advisor
picks, among the profiled buckets, the list with the least expected padding whose
predicted cost (:func:`bcgprof.predict.predict_buckets`) fits the budget even at the top of
its error band. The largest profiled bucket is always kept: it is the chunk size.

**Expected padding**, wherever bcgprof prints it, is padded tokens over requested tokens:
the tokens computed for nothing, divided by the tokens the requests asked for (full chunks
included). Lengths 3, 5 and 10 on the list 4,8 pad 1 + 3 + 2 = 6 tokens (10 runs as a chunk
of 8 and a remainder of 2 in bucket 4) of 18 requested: 33.3%. :func:`padding_pct` is the
one definition.

The search: a dynamic programme over the sorted candidates finds, for every budget in whole
MiB, the list with the least padding when each bucket costs a fixed amount on top of the
largest bucket alone. In ``shared`` mode that additive model is the prediction itself, so the
optimum is exact. In ``per-bucket`` mode (outputs first fill the space the largest bucket
freed, then grow the pool) and ``shared-largest`` mode (the second bucket may grow the pool)
costs are not additive: there the programme runs with two per-bucket cost models (graph
executables only, and executables plus the bucket's standalone output), every list it finds
on either is re-predicted exactly, and the advice is the least-padding list whose exact
prediction fits the budget. Because a bucket captured right after the largest may grow the
pool by a large one-off amount (see :mod:`bcgprof.predict`), the search runs once over all
candidates and once over only those that would not. The trade-off curve is drawn from the
same exact predictions.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bcgprof.errors import BcgprofError
from bcgprof.inputs import open_regular_text
from bcgprof.predict import PredictionError, bucket_profile, predict_buckets
from bcgprof.report import Report
from bcgprof.text import printable

MIB = 1 << 20
ADVISE_MODES = ("shared-largest", "shared", "per-bucket")


class AdviceError(BcgprofError):
    """Input the advisor cannot use (exit 2)."""


@dataclass
class Advice:
    mode: str
    budget_bytes: int
    buckets: list[int]
    predicted_bytes: int
    expected_padding_pct: float
    high_bytes: int  # the top of the prediction's band: this is what must fit the budget
    curve: list[tuple[int, float, int]] = field(default_factory=list)  # (budget bytes, padding %, buckets)
    lengths_source: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def spec(self) -> str:
        return ",".join(str(b) for b in self.buckets)


# ---------------------------------------------------------------- lengths


MAX_LENGTHS_FILE_BYTES = 256 * 2 ** 20  # about 30 million token counts
MAX_LENGTHS = 50_000_000
MAX_REQUEST_TOKENS = 2 ** 31 - 1  # longer than any context window


def read_lengths(path: Path) -> list[int]:
    """Token counts, one per row, from a CSV file (a header row is allowed; the first column is read).

    Only a regular file of at most :data:`MAX_LENGTHS_FILE_BYTES` is read, row by row, so a bad row is
    found without reading the rest.
    """
    what = "--lengths"
    values: list[int] = []
    with open_regular_text(Path(path), what, MAX_LENGTHS_FILE_BYTES) as f:
        try:
            for lineno, row in enumerate(csv.reader(f), start=1):
                if not row or not row[0].strip():
                    continue
                cell = row[0].strip()
                if len(cell) > 20 or not cell.lstrip("+-").isdigit():
                    if lineno == 1:
                        continue  # a header
                    raise AdviceError(f"{what} {path}:{lineno}: {printable(cell, 40)!r} is not a token count; one "
                                      "integer per row")
                value = int(cell)
                if not 1 <= value <= MAX_REQUEST_TOKENS:
                    raise AdviceError(f"{what} {path}:{lineno}: a token count is from 1 to {MAX_REQUEST_TOKENS}, "
                                      f"got {value}")
                values.append(value)
                if len(values) > MAX_LENGTHS:
                    raise AdviceError(f"{what} {path} holds more than {MAX_LENGTHS} token counts; pass a sample")
        except (UnicodeDecodeError, csv.Error) as e:
            raise AdviceError(f"cannot read {what} {path}: {printable(e, 120)}; give a UTF-8 CSV file of token "
                              "counts") from None
    if not values:
        raise AdviceError(f"{what} {path} holds no token counts")
    return values


def length_weights(candidates: list[int], lengths: Optional[Sequence[int]]) -> tuple[np.ndarray, float, str]:
    """Per-token-count weights over 1..max (the remainders after chunking at the largest bucket), the
    requested tokens they stand for (full chunks included), and a description of the source."""
    top = candidates[-1]
    weights = np.zeros(top + 1)
    if lengths is None:
        weights[1:] = 1.0
        return weights, float(top * (top + 1) // 2), f"uniform over 1..{top} tokens"
    for t in lengths:
        rem = t % top
        if rem:
            weights[rem] += 1.0
    requested = float(sum(lengths))
    return weights, requested, f"{len(lengths)} observed lengths ({requested:.0f} tokens)"


def padding_pct(buckets: Sequence[int], weights: np.ndarray, requested_tokens: float) -> float:
    """Expected padding in percent: padded tokens over requested tokens (the module docstring's definition)."""
    return 100.0 * padding_of(buckets, weights) / requested_tokens if requested_tokens else 0.0


# ---------------------------------------------------------------- the search


def _padding_table(candidates: list[int], weights: np.ndarray) -> np.ndarray:
    """pad[i, j]: padded tokens (weighted) of the counts in (candidates[i], candidates[j]] run in bucket j;
    i = -1 (row 0 here) for counts from 1."""
    n = len(candidates)
    tokens = np.arange(len(weights), dtype=float)
    cw = np.cumsum(weights)  # weight of counts <= x
    ct = np.cumsum(weights * tokens)  # weighted tokens of counts <= x
    pad = np.full((n + 1, n), np.inf)
    bounds = [0] + candidates
    for j, b in enumerate(candidates):
        for i in range(j + 1):
            lo = bounds[i]
            w = cw[b] - cw[lo]
            t = ct[b] - ct[lo]
            pad[i, j] = b * w - t
    return pad


def _programme(cand: list[int], costs: Sequence[int], units: int, weights: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """best[j][u]: least padding of counts <= cand[j] with cand[j] chosen, spending at most u units on the
    chosen buckets below the largest; back[j][u]: the chosen bucket before j (-1: none)."""
    n = len(cand)
    pad = _padding_table(cand, weights)
    inf = np.inf
    best = np.full((n, units + 1), inf)
    back = np.full((n, units + 1), -2, dtype=np.int64)
    for j in range(n):
        c = 0 if j == n - 1 else int(costs[j])
        if c <= units:
            best[j, c:] = pad[0, j]  # nothing chosen below j
            back[j, c:] = -1
        for i in range(j):
            if c > units:
                break
            shifted = np.full(units + 1, inf)
            shifted[c:] = best[i, : units + 1 - c] + pad[i + 1, j]
            better = shifted < best[j]
            best[j][better] = shifted[better]
            back[j][better] = i
    return best, back


def _trace(cand: list[int], costs: Sequence[int], back: np.ndarray, u: int) -> list[int]:
    """The list the programme chose with ``u`` units: the largest bucket, then back to the smallest."""
    last = len(cand) - 1
    chosen, j = [], last
    while j >= 0:
        chosen.append(cand[j])
        i = int(back[j, u])
        u -= 0 if j == last else int(costs[j])
        j = i
    return sorted(chosen)


def optimise(candidates: Sequence[int], costs: Sequence[int], fixed: int, budget: int, weights: np.ndarray
             ) -> tuple[Optional[list[int]], np.ndarray]:
    """Least padding subject to ``fixed + sum(costs of chosen) <= budget`` (costs in MiB, the last candidate always
    chosen and its cost in ``fixed``). Returns the chosen buckets (None if nothing fits) and the best padding for
    every budget fixed..budget (the trade-off curve, indexed by units above ``fixed``)."""
    cand = list(candidates)
    units = budget - fixed
    if units < 0:
        return None, np.full(max(budget + 1, 1), np.inf)
    best, back = _programme(cand, costs, units, weights)
    row = best[-1]  # at most u units: falls as u grows
    if not np.isfinite(row[units]):
        return None, row
    u = int(np.flatnonzero(row <= row.min())[0])  # the cheapest way to the least padding
    return _trace(cand, costs, back, u), row


def pareto_lists(candidates: Sequence[int], costs: Sequence[int], fixed: int, weights: np.ndarray
                 ) -> list[list[int]]:
    """Every list that is optimal (least padding) for some budget under additive ``costs`` (MiB), cheapest
    first: one per padding level of the trade-off curve."""
    cand = list(candidates)
    best, back = _programme(cand, costs, sum(int(c) for c in costs), weights)
    row = best[-1]
    levels = np.flatnonzero(np.concatenate(([True], row[1:] < row[:-1])))  # where the least padding falls
    return [_trace(cand, costs, back, int(u)) for u in levels if np.isfinite(row[u])]


def brute_force(candidates: Sequence[int], costs: Sequence[int], fixed: int, budget: int, weights: np.ndarray
                ) -> tuple[Optional[list[int]], float]:
    """The same optimum by trying every subset (small candidate sets; tests)."""
    from itertools import combinations

    cand = list(candidates)
    n = len(cand)
    best, best_pad = None, math.inf
    for k in range(n):
        for subset in combinations(range(n - 1), k):
            cost = fixed + sum(int(costs[i]) for i in subset)
            if cost > budget:
                continue
            chosen = [cand[i] for i in subset] + [cand[-1]]
            p = padding_of(chosen, weights)
            if p < best_pad - 1e-9:
                best, best_pad = chosen, p
    return best, best_pad


def padding_of(buckets: Sequence[int], weights: np.ndarray) -> float:
    """Weighted padded tokens of a bucket list (every count runs in the smallest bucket that holds it)."""
    total, lo = 0.0, 0
    for b in sorted(buckets):
        counts = np.arange(lo + 1, b + 1)
        total += float(np.sum((b - counts) * weights[lo + 1: b + 1]))
        lo = b
    return total


def advise(report: Report, budget: int, *, mode: str = "shared-largest", lengths: Optional[Sequence[int]] = None,
           curve_points: int = 12) -> Advice:
    """The bucket list with the least expected padding whose predicted ``mode`` cost fits ``budget`` bytes."""
    if mode not in ADVISE_MODES:
        raise AdviceError(f"advise supports the modes {', '.join(ADVISE_MODES)}, not {mode!r}")
    if mode not in report.modes():
        raise AdviceError(f"{report.path} has no {mode} rows to predict from; profile with --modes including {mode}")
    candidates = sorted(report.run.buckets)
    weights, requested_tokens, source = length_weights(candidates, lengths)
    profile = bucket_profile(report)  # read once: every list below is predicted from it

    def predicted(buckets: Sequence[int]):
        return predict_buckets(report, buckets, [mode], profile=profile).mode(mode)

    whole = predicted(candidates)
    alone = predicted([candidates[-1]])
    fixed = math.ceil(alone.device_used_bytes / MIB)
    if fixed > budget // MIB:
        raise AdviceError(f"the largest bucket alone is predicted at {alone.device_used_bytes / MIB:.0f} MiB in {mode} "
                          f"mode, above the budget of {budget / MIB:.0f} MiB; raise --budget or profile a smaller "
                          "largest bucket")
    later = {r.bucket: r for r in whole.buckets if r.order > 0}
    pools = [candidates]
    if mode == "shared":
        families = [[later[b].device_used_delta_bytes for b in candidates[:-1]]]
    else:  # non-additive: each bucket's executables alone, and with its standalone output
        families = [[later[b].non_torch_delta_bytes + later[b].outside_pool_delta_bytes for b in candidates[:-1]],
                    [max(later[b].device_used_delta_bytes, later[b].non_torch_delta_bytes
                         + later[b].outside_pool_delta_bytes + later[b].retained_output_bytes)
                     for b in candidates[:-1]]]
        # A second bucket that grows the pool beside the kept largest output is a one-off cost no additive
        # model carries: search also among the buckets that, captured second, would not grow it.
        quiet = [b for b in candidates[:-1] if predicted([b, candidates[-1]]).buckets[1].pool_delta_bytes
                 <= (later[b].pool_delta_bytes if mode == "per-bucket" else 0)]
        if len(quiet) < len(candidates) - 1:
            pools.append(quiet + [candidates[-1]])
    lists: dict[tuple[int, ...], None] = {}
    for family in families:
        cost_of = dict(zip(candidates[:-1], family))
        for pool in pools:
            costs = [max(0, math.ceil(cost_of[b] / MIB)) for b in pool[:-1]] + [0]
            for chosen in pareto_lists(pool, costs, fixed, weights):
                lists.setdefault(tuple(chosen))
    scored = []  # (exact predicted bytes, top of its band, padding %, list)
    for chosen in lists:
        pred = predicted(chosen)
        pct = padding_pct(chosen, weights, requested_tokens)
        scored.append((pred.device_used_bytes, pred.high_bytes, pct, list(chosen)))
    fits = [s for s in scored if s[1] <= budget]  # within the budget even at the top of its band
    if not fits:
        raise AdviceError(f"no list drawn from the profile is predicted within {budget / MIB:.0f} MiB in {mode} mode "
                          "(with its error band); raise --budget")
    cost, high, pct, chosen = min(fits, key=lambda s: (s[2], s[1]))
    return Advice(mode=mode, budget_bytes=budget, buckets=chosen, predicted_bytes=cost, high_bytes=high,
                  expected_padding_pct=round(pct, 4), curve=_curve(scored, curve_points), lengths_source=source)


def _curve(scored: list[tuple[int, int, float, list[int]]], points: int) -> list[tuple[int, float, int]]:
    """Budget against least padding (exact predictions, band included), from the cheapest list to the least
    padded one."""
    lo = min(s[1] for s in scored)
    hi = min(scored, key=lambda s: (s[2], s[1]))[1]
    out = []
    for k in range(points):
        b = int(round(lo + (hi - lo) * k / max(points - 1, 1)))
        _, _, pct, chosen = min((s for s in scored if s[1] <= b), key=lambda s: (s[2], s[1]))
        if not out or pct < out[-1][1]:
            out.append((b, pct, len(chosen)))
    return out


def advice_json(advice: Advice) -> dict:
    """The JSON contract of `bcgprof advise -f json` (plus the curve and notes)."""
    return {"buckets": advice.buckets, "spec": advice.spec, "mode": advice.mode,
            "predicted_bytes": advice.predicted_bytes, "predicted_high_bytes": advice.high_bytes,
            "expected_padding_pct": advice.expected_padding_pct,
            "budget_bytes": advice.budget_bytes, "lengths": advice.lengths_source, "label": "predicted, not measured",
            "curve": [{"budget_bytes": b, "expected_padding_pct": round(p, 4), "buckets": n}
                      for b, p, n in advice.curve],
            "notes": advice.notes}


__all__ = ["Advice", "AdviceError", "PredictionError", "advise", "advice_json", "brute_force", "optimise",
           "padding_of", "pareto_lists", "read_lengths"]
