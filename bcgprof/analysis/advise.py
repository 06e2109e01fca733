"""`bcgprof advise`: the bucket list that wastes the least compute on padding within a memory budget.

A prefill batch of ``t`` tokens runs in the smallest captured bucket ``b >= t`` and
computes ``b - t`` tokens for nothing; a batch longer than the largest bucket is cut into
chunks of the largest bucket, and only its remainder pads. Given the distribution of
prefill sizes (observed token counts, or uniform over the profiled range), the advisor
picks, among the profiled buckets, the list with the least expected padding whose
predicted cost (:func:`bcgprof.analysis.predict.predict_buckets`) fits the budget even at the top of
its error band. The largest profiled bucket is always kept: it is the chunk size.

**Expected padding**, wherever bcgprof prints it, is padded tokens over requested tokens:
the tokens computed for nothing, divided by the tokens the requests asked for (full chunks
included). Lengths 3, 5 and 10 on the list 4,8 pad 1 + 3 + 2 = 6 tokens (10 runs as a chunk
of 8 and a remainder of 2 in bucket 4) of 18 requested: 33.3%. :func:`padding_pct` is the
one definition.

The search: a dynamic programme over the sorted candidates finds, for every budget in whole
MiB, the list with the least padding when each bucket costs a fixed amount on top of the
largest bucket alone. Real costs are not additive (per-bucket outputs first fill the space
the largest bucket freed, then grow the pool; the bucket captured right after a kept largest
output may grow it by a large one-off amount), so the programme runs with two per-bucket
cost models (graph executables only, and executables plus the bucket's standalone output,
for ``shared``: each bucket's cost in the whole list), once over all candidates and once over
only those that, captured second, would not grow the pool. Every list it finds is a
candidate, and the advice is the least-padding candidate whose exact prediction (the pool
replayed from the profile's allocator traces) fits the budget. Candidates are replayed only
when the choice depends on them: a list's bound (the pool after its two largest buckets,
which later buckets cannot shrink, plus every other bucket's costs outside it and the band's top) is
at most its prediction, so a list whose bound is above the budget is never replayed. The
trade-off curve is drawn from the same exact predictions. On the 74-bucket default profile
(``reports/gpt-oss-20b-h200-traced``) that is about 100 predictions and 350-550 bucket replays,
sharing their replayed prefixes (:mod:`bcgprof.analysis.replay`): a few seconds. A last step tries
local moves from the advice (one bucket added, or moved to a neighbouring candidate) while one
pads less and fits.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from bcgprof.analysis.bands import TOO_WIDE
from bcgprof.analysis.predict import PredictionError, bucket_profile, list_band, predict_buckets
from bcgprof.errors import BcgprofError
from bcgprof.inputs import open_regular_text
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
    low_bytes: int = 0  # the bottom of the prediction's band
    exact: bool = False  # the list's pool replayed from every event of its buckets
    band_source: str = ""  # what the band was derived from (bcgprof.analysis.bands)

    @property
    def spec(self) -> str:
        return ",".join(str(b) for b in self.buckets)

    @property
    def margin_bytes(self) -> int:
        """The budget left above the top of the band (never negative for a chosen list)."""
        return self.budget_bytes - self.high_bytes


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
    # the pool after a list's two largest buckets, which no later bucket can shrink: part of each list's bound
    pair_pool = {b: predicted([b, candidates[-1]]).pool_bytes for b in candidates[:-1]}
    pools = [candidates]
    if mode == "shared":
        families = [[later[b].device_used_delta_bytes for b in candidates[:-1]]]
    else:  # non-additive: each bucket's executables alone, with its standalone output, and as in the whole list
        families = [[later[b].non_torch_delta_bytes + later[b].outside_pool_delta_bytes for b in candidates[:-1]],
                    [max(later[b].device_used_delta_bytes, later[b].non_torch_delta_bytes
                         + later[b].outside_pool_delta_bytes + later[b].retained_output_bytes)
                     for b in candidates[:-1]],
                    [max(0, later[b].device_used_delta_bytes) for b in candidates[:-1]]]
        # A second bucket that grows the pool beside the kept largest output is a one-off cost no additive
        # model carries: search also among the buckets that, captured second, would not grow it.
        quiet = [b for b in candidates[:-1] if pair_pool[b] - alone.pool_bytes
                 <= (later[b].pool_delta_bytes if mode == "per-bucket" else 0)]
        if len(quiet) < len(candidates) - 1:
            pools.append(quiet + [candidates[-1]])
    lists: dict[tuple[int, ...], None] = {(candidates[-1],): None}  # the largest bucket alone is always a choice
    # The band grows with the list's length (in proportion, past the longest held-out list), which no additive
    # cost carries: each family is searched again with every bucket charged the band's growth at a few list
    # lengths (its slope there).
    shares = sorted({list_band(profile, mode, k + 1) - list_band(profile, mode, k) for k in BAND_LENGTHS} | {0})
    for family in families:
        cost_of = dict(zip(candidates[:-1], family, strict=True))
        for pool in pools:
            for share in shares:
                costs = [max(0, math.ceil((cost_of[b] + share) / MIB)) for b in pool[:-1]] + [0]
                for chosen in pareto_lists(pool, costs, fixed, weights):
                    lists.setdefault(tuple(chosen))
    first = alone.buckets[0]
    fixed_bytes = first.outside_pool_delta_bytes + first.non_torch_delta_bytes

    def bound(chosen: tuple[int, ...], known: int = 0) -> int:
        """At most the list's prediction: the pool after its two largest buckets, or after a longer prefix
        already replayed (``known``; no later bucket shrinks the pool), every bucket's costs outside the pool
        (its row's torch memory, its executables as :func:`predict_buckets` reads them), and the band's top."""
        return (fixed_bytes + max(known, pair_pool[chosen[-2]] if len(chosen) > 1 else alone.pool_bytes)
                + list_band(profile, mode, len(chosen))
                + sum(later[b].outside_pool_delta_bytes + later[b].non_torch_delta_bytes for b in chosen[:-1]))

    def tighter(chosen: tuple[int, ...]) -> int:
        return bound(chosen, profile.replayer.known_pool(mode, chosen))

    scorer = _Lazy(predicted, lambda chosen: padding_pct(chosen, weights, requested_tokens), bound, tighter, lists)
    best = scorer.best_within(budget)  # within the budget even at the top of its band
    if best is None:
        raise AdviceError(f"no list drawn from the profile is predicted within {budget / MIB:.0f} MiB in {mode} mode "
                          "(with its error band); raise --budget")
    best = scorer.improve(best, budget, candidates)
    cost, high, pct, chosen = best
    final = predicted(chosen)  # replayed already: the band's bottom and source
    notes = [f"the band ({(final.high_bytes - final.low_bytes) / MIB:.0f} MiB) is {TOO_WIDE}: the evidence does not "
             "pin this list down (see the band's source)"] if final.band_too_wide else []
    return Advice(mode=mode, budget_bytes=budget, buckets=chosen, predicted_bytes=cost, high_bytes=high,
                  expected_padding_pct=round(pct, 4), curve=scorer.curve(curve_points), lengths_source=source,
                  notes=notes, low_bytes=final.low_bytes, exact=final.exact, band_source=final.band_source)


BAND_LENGTHS = (1, 3, 8, 20, 50)  # list lengths at which the band's growth per bucket is charged
IMPROVE_ROUNDS = 8  # moves tried from the best candidate (each round: add one bucket, or move one to a neighbour)


class _Lazy:
    """The candidate lists, predicted exactly only when a choice depends on it.

    A list's exact prediction is at least its bound, so a list whose bound is above a budget cannot fit
    it and is never replayed. Choices are those of predicting every list: the least padding within the
    budget, ties broken by the lower top of the band.
    """

    def __init__(self, predicted, pct, bound, tighter, lists):
        self.predicted, self.pct_of, self.bound_of, self.tighter = predicted, pct, bound, tighter
        self.pct: dict[tuple[int, ...], float] = {}
        self.bound: dict[tuple[int, ...], int] = {}
        self.groups: dict[float, list[tuple[int, ...]]] = {}
        self.exact: dict[tuple[int, ...], tuple[int, int]] = {}  # list -> (predicted bytes, top of the band)
        for chosen in lists:
            self.add(chosen)

    def add(self, chosen: tuple[int, ...]) -> None:
        if chosen not in self.pct:
            p = self.pct[chosen] = self.pct_of(chosen)
            self.bound[chosen] = self.bound_of(chosen)
            self.groups.setdefault(p, []).append(chosen)
            self.order = sorted(self.groups)

    def _fits(self, chosen: tuple[int, ...], budget: int) -> Optional[tuple[int, int]]:
        """The exact prediction when the list can fit ``budget``; None when a bound already says it cannot."""
        if self.bound[chosen] > budget:
            return None
        if chosen not in self.exact:
            self.bound[chosen] = max(self.bound[chosen], self.tighter(chosen))  # a replayed prefix may rule it out
            if self.bound[chosen] > budget:
                return None
        return self._exact(chosen)

    def _exact(self, chosen: tuple[int, ...]) -> tuple[int, int]:
        if chosen not in self.exact:
            m = self.predicted(chosen)
            self.exact[chosen] = (m.device_used_bytes, m.high_bytes)
        return self.exact[chosen]

    def best_within(self, budget: int) -> Optional[tuple[int, int, float, list[int]]]:
        """(predicted bytes, top of the band, padding %, list) of the least padded list within ``budget``."""
        for p in self.order:
            exact = [(self._fits(c, budget), c) for c in self.groups[p]]
            fitting = [(e[1], c) for e, c in exact if e is not None and e[1] <= budget]
            if fitting:
                high, chosen = min(fitting)
                return self.exact[chosen][0], high, p, list(chosen)
        return None

    def improve(self, best: tuple[int, int, float, list[int]], budget: int, candidates: list[int]
                ) -> tuple[int, int, float, list[int]]:
        """Local moves from ``best`` while one pads less and fits: add a bucket, or move one to a neighbouring
        candidate (the additive cost models that proposed the candidates cannot see every interaction)."""
        for _ in range(IMPROVE_ROUNDS):
            current = best[3]
            members = set(current)
            moves = {tuple(sorted([*current, y])) for y in candidates if y not in members}
            for i, x in enumerate(candidates[:-1]):
                if x in members:
                    for y in (candidates[i - 1] if i else None, candidates[i + 1]):
                        if y is not None and y not in members:
                            moves.add(tuple(sorted([*members - {x}, y])))
            for m in moves:
                self.add(m)
            better = sorted((self.pct[m], self.bound[m], m) for m in moves
                            if self.pct[m] < best[2] and self.bound[m] <= budget)
            found = None
            for p, _, m in better:
                exact = self._fits(m, budget)
                if exact is not None and exact[1] <= budget:
                    found = (exact[0], exact[1], p, list(m))
                    break
            if found is None:
                return best
            best = found
        return best

    def curve(self, points: int) -> list[tuple[int, float, int]]:
        """Budget against least padding (exact predictions, band included), from the cheapest list to the least
        padded one."""
        lo = None
        for chosen in sorted(self.bound, key=lambda c: self.bound[c]):  # the cheapest list: bounds rise, stop past it
            if lo is not None and self.bound[chosen] > lo:
                break
            high = self._exact(chosen)[1]
            lo = high if lo is None else min(lo, high)
        hi = min(self._exact(c)[1] for c in self.groups[self.order[0]])
        assert lo is not None
        out: list[tuple[int, float, int]] = []
        for k in range(points):
            b = round(lo + (hi - lo) * k / max(points - 1, 1))
            best = self.best_within(b)
            if best is None:
                continue
            _, _, pct, picked = best
            if not out or pct < out[-1][1]:
                out.append((b, pct, len(picked)))
        return out


def advice_json(advice: Advice) -> dict:
    """The JSON contract of `bcgprof advise -f json` (plus the curve and notes)."""
    return {"buckets": advice.buckets, "spec": advice.spec, "mode": advice.mode,
            "predicted_bytes": advice.predicted_bytes, "predicted_high_bytes": advice.high_bytes,
            "predicted_low_bytes": advice.low_bytes, "margin_bytes": advice.margin_bytes, "exact": advice.exact,
            "band_source": advice.band_source,
            "expected_padding_pct": advice.expected_padding_pct,
            "budget_bytes": advice.budget_bytes, "lengths": advice.lengths_source, "label": "predicted, not measured",
            "curve": [{"budget_bytes": b, "expected_padding_pct": round(p, 4), "buckets": n}
                      for b, p, n in advice.curve],
            "notes": advice.notes}


__all__ = ["Advice", "AdviceError", "PredictionError", "advice_json", "advise", "brute_force", "optimise",
           "padding_of", "pareto_lists", "read_lengths"]
