"""`bcgprof advise`: the bucket list that wastes the least compute on padding within a memory budget.

A prefill batch of ``t`` tokens runs in the smallest captured bucket ``b >= t`` and
computes ``b - t`` tokens for nothing; a batch longer than the largest bucket is cut into
chunks of the largest bucket, and only its remainder pads. Given the distribution of
prefill sizes (observed token counts, or uniform over the profiled range), the advisor
picks, among the profiled buckets, the list with the least expected padding whose
predicted cost (:func:`bcgprof.predict.predict_buckets`) fits the budget. The largest
profiled bucket is always kept: it is the chunk size.

In the modes that keep no per-bucket output (``shared``, ``shared-largest``) the predicted
cost of a list is the largest bucket's cost plus each other bucket's own (its graph
executables), so the optimum is found exactly by dynamic programming over the sorted
candidates (budgets counted in whole MiB, rounded against the list). ``per-bucket``
costs are not additive (outputs first fill freed pool space): there the advisor searches
the same way on each bucket's standalone cost, then re-predicts the chosen list and
tightens the budget until the prediction fits.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bcgprof.errors import BcgprofError
from bcgprof.predict import PredictionError, predict_buckets
from bcgprof.report import Report

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
    curve: list[tuple[int, float, int]] = field(default_factory=list)  # (budget bytes, padding %, buckets)
    lengths_source: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def spec(self) -> str:
        return ",".join(str(b) for b in self.buckets)


# ---------------------------------------------------------------- lengths


def read_lengths(path: Path) -> list[int]:
    """Token counts, one per row, from a CSV file (a header row is allowed; the first column is read)."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise AdviceError(f"--lengths {path} does not exist; give a CSV file of observed prefill token counts") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AdviceError(f"cannot read --lengths {path}: {e}; give a UTF-8 CSV file of token counts") from None
    values = []
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or not row[0].strip():
            continue
        cell = row[0].strip()
        try:
            value = int(cell)
        except ValueError:
            if lineno == 1:
                continue  # a header
            raise AdviceError(f"--lengths {path}:{lineno}: {cell!r} is not a token count; one integer per row") \
                from None
        if value < 1:
            raise AdviceError(f"--lengths {path}:{lineno}: token counts are positive, got {value}")
        values.append(value)
    if not values:
        raise AdviceError(f"--lengths {path} holds no token counts")
    return values


def _weights(candidates: list[int], lengths: Optional[Sequence[int]]) -> tuple[np.ndarray, np.ndarray, str]:
    """Per-token-count weights over 1..max (the remainders after chunking at the largest bucket)."""
    top = candidates[-1]
    weights = np.zeros(top + 1)
    if lengths is None:
        weights[1:] = 1.0
        return weights, np.arange(top + 1, dtype=float), f"uniform over 1..{top} tokens"
    for t in lengths:
        rem = t % top
        if rem:
            weights[rem] += 1.0
    total_tokens = float(sum(lengths))
    return weights, np.arange(top + 1, dtype=float), f"{len(lengths)} observed lengths ({total_tokens:.0f} tokens)"


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


def optimise(candidates: Sequence[int], costs: Sequence[int], fixed: int, budget: int, weights: np.ndarray
             ) -> tuple[Optional[list[int]], np.ndarray]:
    """Least padding subject to ``fixed + sum(costs of chosen) <= budget`` (costs in MiB, the last candidate always
    chosen and its cost in ``fixed``). Returns the chosen buckets (None if nothing fits) and the best padding for
    every budget 0..budget (the trade-off curve)."""
    cand = list(candidates)
    n = len(cand)
    units = budget - fixed
    if units < 0:
        return None, np.full(max(budget + 1, 1), np.inf)
    pad = _padding_table(cand, weights)
    inf = np.inf
    # best[j][u]: least padding of counts <= cand[j] with cand[j] chosen, spending u units on the chosen
    # buckets below the largest
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
    last = n - 1
    curve = np.minimum.accumulate(best[last])
    if not np.isfinite(best[last, units]):
        return None, curve
    row = best[last]
    u = int(np.flatnonzero(row <= row.min())[0])  # the cheapest way to the least padding
    chosen, j = [], last
    while j >= 0:
        chosen.append(cand[j])
        i = int(back[j, u])
        u -= 0 if j == last else int(costs[j])
        j = i
    return sorted(chosen), curve


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
    weights, _, source = _weights(candidates, lengths)
    total_tokens = float(np.sum(weights * np.arange(len(weights))))
    whole = predict_buckets(report, candidates, [mode]).mode(mode)
    alone = predict_buckets(report, [candidates[-1]], [mode]).mode(mode)
    # each smaller bucket's own cost: its row in the full-list prediction (per-bucket: outputs included)
    per_bucket = {r.bucket: r.device_used_delta_bytes for r in whole.buckets if r.order > 0}
    if mode == "per-bucket":
        for r in whole.buckets:
            if r.order > 0:
                per_bucket[r.bucket] = max(r.device_used_delta_bytes, r.non_torch_delta_bytes + r.retained_output_bytes)
    costs = [math.ceil(per_bucket[b] / MIB) for b in candidates[:-1]] + [0]
    fixed = math.ceil(alone.device_used_bytes / MIB)
    notes = []
    limit = budget // MIB
    if fixed > limit:
        raise AdviceError(f"the largest bucket alone is predicted at {alone.device_used_bytes / MIB:.0f} MiB in {mode} "
                          f"mode, above the budget of {budget / MIB:.0f} MiB; raise --budget or profile a smaller "
                          "largest bucket")
    chosen, curve = None, None
    predicted = None
    for attempt in range(8):  # per-bucket: tighten until the re-predicted list fits
        chosen, curve = optimise(candidates, costs, fixed, limit, weights)
        predicted = predict_buckets(report, chosen, [mode]).mode(mode)
        if predicted.device_used_bytes <= budget or mode != "per-bucket":
            break
        limit -= math.ceil((predicted.device_used_bytes - budget) / MIB)
        notes.append(f"re-predicted {predicted.device_used_bytes / MIB:.0f} MiB > budget: searched again within "
                     f"{limit} MiB")
    pct = 100.0 * padding_of(chosen, weights) / total_tokens if total_tokens else 0.0
    points = []
    full = _full_curve(candidates, costs, fixed, weights, total_tokens, curve_points)
    for budget_mib, pad_pct, count in full:
        points.append((budget_mib * MIB, pad_pct, count))
    return Advice(mode=mode, budget_bytes=budget, buckets=chosen, predicted_bytes=predicted.device_used_bytes,
                  expected_padding_pct=round(pct, 4), curve=points, lengths_source=source, notes=notes)


def _full_curve(candidates, costs, fixed, weights, total_tokens, points) -> list[tuple[int, float, int]]:
    """Budget against least padding, from the largest bucket alone to every bucket."""
    top = fixed + sum(costs)
    steps = sorted({int(round(fixed + (top - fixed) * k / max(points - 1, 1))) for k in range(points)})
    out = []
    for b in steps:
        chosen, _ = optimise(candidates, costs, fixed, b, weights)
        if chosen is None:
            continue
        out.append((b, 100.0 * padding_of(chosen, weights) / total_tokens if total_tokens else 0.0, len(chosen)))
    return out


def advice_json(advice: Advice) -> dict:
    """The JSON contract of `bcgprof advise -f json` (plus the curve and notes)."""
    return {"buckets": advice.buckets, "spec": advice.spec, "mode": advice.mode,
            "predicted_bytes": advice.predicted_bytes, "expected_padding_pct": advice.expected_padding_pct,
            "budget_bytes": advice.budget_bytes, "lengths": advice.lengths_source, "label": "predicted, not measured",
            "curve": [{"budget_bytes": b, "expected_padding_pct": round(p, 4), "buckets": n}
                      for b, p, n in advice.curve],
            "notes": advice.notes}


__all__ = ["Advice", "AdviceError", "PredictionError", "advise", "advice_json", "brute_force", "optimise",
           "padding_of", "read_lengths"]
