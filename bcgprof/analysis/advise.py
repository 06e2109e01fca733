"""`bcgprof advise`: the bucket list that wastes the least compute on padding within a memory budget.

A prefill batch of ``t`` tokens runs in the smallest captured bucket ``b >= t`` and
computes ``b - t`` tokens for nothing; a batch longer than the largest bucket is cut into
chunks of the largest bucket, and only its remainder pads. Given the distribution of
prefill sizes (observed token counts, or uniform over the profiled range), the advisor
picks, among the profiled buckets, the list with the least expected padding whose
predicted cost (:func:`bcgprof.analysis.predict.predict_buckets`) fits the budget even at the top of
its error band. The largest profiled bucket is always kept: it is the chunk size.

With ``free`` (``advise --free SIZE``) the list must also capture with SIZE free on the device
when its first warm-up begins, as a server's start-up has it: a capture needs more than it
keeps, since each bucket's eager warm-up leaves its blocks cached while the pool grows
(:mod:`bcgprof.analysis.headroom`). A candidate that fits the budget is kept only if its
replayed need (the largest over its buckets of what earlier buckets kept plus the bucket's
warm-up cache, pool growth and executables) is within SIZE; that reads the prediction the
budget check made, so it adds no replay, but the search then goes on to more padded lists.
The trade-off curve carries the same constraint.

**Expected padding**, wherever bcgprof prints it, is padded tokens over requested tokens:
the tokens computed for nothing, divided by the tokens the requests asked for (full chunks
included). Lengths 3, 5 and 10 on the list 4,8 pad 1 + 3 + 2 = 6 tokens (10 runs as a chunk
of 8 and a remainder of 2 in bucket 4) of 18 requested: 33.3%. :func:`padding_pct` is the
one definition.

The search: a dynamic programme over the sorted candidates finds, for every budget in whole
MiB, the list with the least padding when each bucket costs a fixed amount on top of the
largest bucket alone. Real costs are not additive (per-bucket outputs first fill the space
the largest bucket freed, then grow the pool; the bucket captured right after a kept largest
output may grow it by a large one-off amount), so the programme runs with several per-bucket
cost models (graph executables and torch memory outside the pool; that plus the bucket's
standalone output, or its device used in the whole list if larger; its device used in the
whole list; for ``shared`` only the last), once over all candidates and once over only those
that, captured second, would not grow the pool, and each again with every bucket charged the
band's growth per bucket: at most 12 programmes. Every list they find is a candidate, and the
advice is the least-padding candidate whose exact prediction (the pool replayed from the
profile's allocator traces) fits the budget at the top of its band; a last step tries local
moves from it (one bucket added, or moved to a neighbouring candidate) while one pads less
and fits.

A list's bound (its first bucket's costs outside the pool; the pool after its two largest
buckets, or the bytes its buckets allocate and never free if more, as no later bucket shrinks
the pool; every later bucket's costs outside the pool; the band's top) is at most its
prediction's top. So a programme runs only up to the most units a list can cost under its
model and still have a bound within the budget (:meth:`_Search.reach`): above that no list
can fit. A list whose bound is above a budget is never built nor replayed, and a replay stops
as soon as the pool leaves no room (:meth:`bcgprof.analysis.replay.Replayer.pool_within`).

Complexity, for ``n`` profiled buckets, ``U`` units (MiB) a programme reaches (about the
budget above the largest bucket alone; more for a model that charges each bucket its output,
which the largest bucket's freed space absorbs) and lists of ``k`` buckets of ``E`` allocator
events each:

* each programme: O(n U) time and memory (:func:`_hull_programme`: one convex hull of lines a
  budget, each line joining and leaving it once, vectorised over the budgets; the O(n^2 U)
  table it replaces gives the same lists, ties included); its O(U) lists are read along its
  back-pointers with their paddings and bounds, O(U k), and built only when replayed;
* each prediction: O(k E log) for the replay, each allocator step bisecting the free lists
  and segments, less the leading buckets it shares with a list replayed before (a prefix tree
  keeps their pools and states), and a bucket replayed before from a pool of the same content
  is looked up instead (the pool of a mode whose buckets free what they allocate comes back
  to the same few free segments); setting up costs 2n - 1 bucket replays (the whole list, and
  each bucket captured after the largest);
* the choice at a budget replays the lists its answer depends on (bound within the budget,
  padding below the answer's); the last step scores each round's O(n) moves in O(1) each and
  replays at most :data:`IMPROVE_TRIES` a round; the trade-off curve repeats the choice at
  12 budgets, from the cheapest list to the least padded one within the budget.

On the 74-bucket default profile (``reports/gpt-oss-20b-h200-traced``) that is a few seconds,
most of it reading the traces; ``benchmarks/advise_scaling.py`` times 256 to 4,096 buckets.
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from bcgprof.analysis.bands import TOO_WIDE
from bcgprof.analysis.predict import (
    BucketProfile,
    ModePrediction,
    PredictionError,
    bucket_profile,
    list_band,
    predict_buckets,
)
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
    work: dict = field(default_factory=dict)  # what the search did: predictions, replays... (not in the JSON)
    needs_free_bytes: Optional[int] = None  # the free memory the list needs when its first warm-up begins
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
        """With --free: the free memory left above what the list needs (never negative for a chosen list)."""
        if self.free_bytes is None or self.needs_free_bytes is None:
            return None
        return self.free_bytes - self.needs_free_bytes


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


class _Padding:
    """Weighted padded tokens from cumulative sums: ``pad(lo, b)``, of the counts in ``(lo, b]`` run in bucket
    ``b``, is ``b * (W(b) - W(lo)) - (T(b) - T(lo))`` (``W``: the weight of the counts up to a value, ``T``:
    their weighted tokens); :func:`padding_of` summed over a list's gaps, in O(1) a gap."""

    def __init__(self, weights: np.ndarray):
        self.cw = np.cumsum(weights)  # weight of counts <= x
        self.ct = np.cumsum(weights * np.arange(len(weights), dtype=float))  # weighted tokens of counts <= x

    def pad(self, lo: int, b: int) -> float:
        return float(b * (self.cw[b] - self.cw[lo]) - (self.ct[b] - self.ct[lo]))

    def of(self, buckets: Sequence[int]) -> float:
        total, lo = 0.0, 0
        for b in buckets:  # ascending, as padding_of adds them
            total += self.pad(lo, b)
            lo = b
        return total


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
    chosen buckets below the largest; back[j][u]: the chosen bucket before j (-1: none; -2: out of reach).
    Ties go to the earliest bucket before j (none first). Integer weights (counts: what advise passes) take
    :func:`_hull_programme`, O(n * units); others the O(n^2 * units) table, with the same results."""
    if _integral(cand, weights):
        return _hull_programme(cand, costs, units, weights)
    return _table_programme(cand, costs, units, weights)


def _table_programme(cand: list[int], costs: Sequence[int], units: int, weights: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
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


EXACT_INTERCEPT = 2 ** 48  # the hull's lines: intercepts and slopes below these, and buckets below
EXACT_SLOPE = 2 ** 27  # EXACT_BUCKET, keep every comparison exact in float64
EXACT_BUCKET = 2 ** 21


def _integral(cand: Sequence[int], weights: np.ndarray) -> bool:
    """Whether the weights are counts small enough for :func:`_hull_programme`'s exact arithmetic (every count
    bcgprof accepts: at most 50 million lengths, buckets up to 2^20 tokens)."""
    w = np.asarray(weights[: cand[-1] + 1], dtype=float)
    if cand[-1] >= EXACT_BUCKET or np.any(w < 0) or np.any(w != np.floor(w)):
        return False
    total = float(w.sum())
    tokens = float(np.dot(w, np.arange(len(w), dtype=float)))
    return total < EXACT_SLOPE and cand[-1] * total + tokens < EXACT_INTERCEPT


def _hull_programme(cand: list[int], costs: Sequence[int], units: int, weights: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_programme` in O(n * units) amortised (the convex hull trick, one hull per budget).

    The padding of a gap below bucket ``x`` is ``K(x) + A_i - x * B_i``: ``K`` depends on the bucket only,
    ``A_i`` is the least padding up to candidate ``i`` (for the budget) plus ``T`` there, ``B_i`` is ``W``
    there. So for each budget the best bucket before ``x`` is the lowest of the lines ``A_i - x * B_i`` at
    ``x``. Buckets come in rising order and lines in rising ``B``, so each budget keeps the lower hull of
    its lines in a deque, each line with the first bucket (row) at which it is strictly below the line
    before it: a row drops from the front the lines that start below their successor by then, and a new
    line drops from the back the lines it starts below no later than they start below theirs (they can
    never be the first least again). Each line joins and leaves each budget's hull at most once. Ties go
    to the earlier line, as in :func:`_table_programme`; every figure is an integer below 2^53 (see
    :func:`_integral`), so values, rows and ties are exactly the table's. Vectorised over the budgets.
    """
    n, width = len(cand), units + 1
    cw = np.cumsum(weights)
    ct = np.cumsum(weights * np.arange(len(weights), dtype=float))
    lo = np.array([0] + list(cand[:-1]))
    slope, offset = cw[lo], ct[lo]  # line r is candidate r - 1 (r = 0: nothing below)
    xs = np.asarray(cand, dtype=float)
    best = np.full((n + 1, width), np.inf)  # row r: line r's least padding for each budget (row 0: nothing, 0)
    best[0] = 0.0
    flat = best.reshape(-1)
    back = np.full((n, width), -2, dtype=np.int32)
    hull = np.zeros((n + 1) * width, dtype=np.int32)  # budget w's hull: its lines at p * width + w, head <= p < tail
    start = np.zeros((n + 1) * width, dtype=np.int32)  # the row from which each is below the one before it (n: never)
    budgets = np.arange(width, dtype=np.int64)
    head = budgets.copy()  # as indices into hull (p * width + w), so that a step is + width
    tail = head + width
    stride = np.int64(width)  # (int32 lines times it stay int64)
    for j in range(n):
        c = 0 if j == n - 1 else int(costs[j])
        if c > units:
            continue
        x, m = int(cand[j]), width - c
        front = np.flatnonzero(tail[:m] - head[:m] > width)
        while front.size:  # the front: lines whose successor is below them from this row on
            front = front[start[head[front] + width] <= j]
            head[front] += width
            front = front[tail[front] - head[front] > width]
        line = hull[head[:m]]
        best[j + 1, c:] = flat[line * stride + budgets[:m]] + (x * (cw[x] - slope[line]) - (ct[x] - offset[line]))
        back[j, c:] = line - 1
        if j == n - 1:
            break
        r = j + 1  # the new line, in every budget it reaches
        a_new, b_new = best[r, c:] + offset[r], slope[r]
        first = np.empty(width - c, dtype=np.int64)  # the row from which it is below the hull's last line
        act: Optional[np.ndarray]
        lay, act = budgets[c:], None  # act: the budgets still looking, as positions in lay (None: all)
        while True:  # the back
            at = tail[lay] - width
            last = hull[at]
            da = (a_new if act is None else a_new[act]) - (flat[last * stride + lay] + offset[last])
            db = b_new - slope[last]
            # below it at x when x * db > da: rows past da / db (exact: see _integral); parallel: never or from
            # the next row on
            level = db == 0
            if level.any():
                q = np.searchsorted(xs, da / np.where(level, 1, db), side="right")
                q[level] = np.where(da[level] < 0, 0, n)
            else:
                q = np.searchsorted(xs, da / db, side="right")
            np.maximum(q, j + 1, out=q)
            if act is None:
                first[:] = q
            else:
                first[act] = q
            drop = (q <= start[at]) & (at > head[lay])
            if not drop.any():
                break
            lay = lay[drop]
            tail[lay] -= width
            act = np.flatnonzero(drop) if act is None else act[drop]
        joins = first < n  # a line never below the last one is never the first least
        lay = budgets[c:][joins]
        at = tail[lay]
        hull[at] = r
        start[at] = first[joins]
        tail[lay] += width
    return best[1:], back


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


def _levels(row: np.ndarray) -> np.ndarray:
    """The units where the least padding falls (and is reached): one list each."""
    levels = np.flatnonzero(np.concatenate(([True], row[1:] < row[:-1])))
    return levels[np.isfinite(row[levels])]


def _paths(costs: Sequence[int], back: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """:func:`_trace` of every level at once: row s holds each list's s-th bucket from the largest down (as a
    candidate index; -1 past its smallest)."""
    last = back.shape[0] - 1
    cost = np.asarray(list(costs)[:-1] + [0], dtype=np.int64)
    at, u = np.full(len(levels), last, dtype=np.int64), levels.astype(np.int64)
    rows = []
    while True:
        rows.append(at.copy())
        on = np.flatnonzero(at >= 0)
        if not on.size:
            break
        nxt = back[at[on], u[on]].astype(np.int64)
        u[on] -= cost[at[on]]
        at[on] = nxt
    return np.array(rows[:-1], dtype=np.int16 if last < 2 ** 15 else np.int32)


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


def pareto_lists(candidates: Sequence[int], costs: Sequence[int], fixed: int, weights: np.ndarray,
                 units: Optional[int] = None) -> list[list[int]]:
    """Every list that is optimal (least padding) for some budget under additive ``costs`` (MiB), cheapest
    first: one per padding level of the trade-off curve; with ``units``, those costing at most that (the same
    lists: the programme up to ``u`` units does not depend on what lies above)."""
    cand = list(candidates)
    total = sum(int(c) for c in costs)
    best, back = _programme(cand, costs, total if units is None else max(0, min(units, total)), weights)
    return [_trace(cand, costs, back, int(u)) for u in _levels(best[-1])]


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


def _most_units(costs: Sequence[int], weights: Sequence[int], room: float) -> float:
    """The most ``costs`` a set of buckets whose ``weights`` add up to at most ``room`` can add up to: the
    fractional knapsack's optimum, an upper bound on any set's (weights at most 0 are taken, and give room)."""
    c, w = np.asarray(costs, dtype=float), np.asarray(weights, dtype=float)
    free = w <= 0
    room -= float(w[free].sum())
    if room < 0:
        return 0.0
    total = float(c[free].sum())
    c, w = c[~free], w[~free]
    order = np.argsort(-c / w, kind="stable")
    c, w = c[order], w[order]
    spent = np.cumsum(w)
    whole = int(np.searchsorted(spent, room, side="right"))
    total += float(c[:whole].sum())
    if whole < len(c):
        total += c[whole] * (room - (spent[whole - 1] if whole else 0.0)) / w[whole]
    return total


def advise(report: Report, budget: int, *, mode: str = "shared-largest", lengths: Optional[Sequence[int]] = None,
           curve_points: int = 12, free: Optional[int] = None) -> Advice:
    """The bucket list with the least expected padding whose predicted ``mode`` cost fits ``budget`` bytes.

    ``free``: the free memory (NVML) when the first bucket's warm-up begins, as a server start-up has it; the
    list must also capture with that much free (:attr:`bcgprof.analysis.headroom.Headroom.needs_free_bytes`:
    the warm-ups' cached blocks and the pool's growth meet at each bucket's peak). Every candidate list keeps
    the profile's largest bucket, so its need is replayed, not bounded."""
    if mode not in ADVISE_MODES:
        raise AdviceError(f"advise supports the modes {', '.join(ADVISE_MODES)}, not {mode!r}")
    if mode not in report.modes():
        raise AdviceError(f"{report.path} has no {mode} rows to predict from; profile with --modes including {mode}")
    candidates = sorted(report.run.buckets)
    weights, requested_tokens, source = length_weights(candidates, lengths)
    profile = bucket_profile(report)  # read once: every list below is predicted from it
    predictions: dict[tuple[int, ...], ModePrediction] = {}

    def predicted(buckets: Sequence[int]) -> ModePrediction:
        key = tuple(sorted(buckets))
        found = predictions.get(key)
        if found is None:
            found = predict_buckets(report, buckets, [mode], profile=profile).mode(mode)
            assert found is not None  # the mode has rows (checked above)
            predictions[key] = found
        return found

    whole = predicted(candidates)
    alone = predicted([candidates[-1]])
    fixed = math.ceil(alone.device_used_bytes / MIB)
    if fixed > budget // MIB:
        raise AdviceError(f"the largest bucket alone is predicted at {alone.device_used_bytes / MIB:.0f} MiB in {mode} "
                          f"mode, above the budget of {budget / MIB:.0f} MiB; raise --budget or profile a smaller "
                          "largest bucket")
    if free is not None:
        if alone.headroom is None:
            raise AdviceError(f"{report.path} cannot say what free memory a capture needs (its allocator traces lack "
                              "the warm-ups); re-capture it with this version of bcgprof to use --free")
        if alone.headroom.needs_free_bytes > free:
            raise AdviceError(f"the largest bucket alone needs {alone.headroom.needs_free_bytes / MIB:.0f} MiB free in "
                              f"{mode} mode, more than --free {free / MIB:.0f} MiB; free more memory or profile a "
                              "smaller largest bucket")
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
    search = _Search(mode, profile, predicted, weights, requested_tokens, candidates, later, alone, pair_pool, free)
    search.add_lists([(candidates[-1],)])  # the largest bucket alone is always a choice
    # The band grows with the list's length (in proportion, past the longest held-out list), which no additive
    # cost carries: each family is searched again with every bucket charged the band's growth at a few list
    # lengths (its slope there).
    shares = sorted({list_band(profile, mode, k + 1) - list_band(profile, mode, k) for k in BAND_LENGTHS} | {0})
    for family in families:
        cost_of = dict(zip(candidates[:-1], family, strict=True))
        for pool in pools:
            for share in shares:
                costs = [max(0, math.ceil((cost_of[b] + share) / MIB)) for b in pool[:-1]] + [0]
                search.add_programme(pool, costs, search.reach(pool, costs, budget))
    best = search.best_within(budget)  # within the budget even at the top of its band
    if best is None:
        within = f" that captures with {free / MIB:.0f} MiB free" if free is not None else ""
        raise AdviceError(f"no list drawn from the profile{within} is predicted within {budget / MIB:.0f} MiB in "
                          f"{mode} mode (with its error band); raise --budget" + (" or --free" if free else ""))
    best = search.improve(best, budget)
    cost, high, pct, chosen = best
    final = predicted(chosen)  # replayed already: the band's bottom and source
    notes = [f"the band ({(final.high_bytes - final.low_bytes) / MIB:.0f} MiB) is {TOO_WIDE}: the evidence does not "
             "pin this list down (see the band's source)"] if final.band_too_wide else []
    curve = search.curve(curve_points, budget)
    work = {"predictions": len(predictions), "lists_checked": search.replayed,
            "bucket_replays": profile.replayer.bucket_replays, "events_replayed": profile.replayer.events_replayed,
            "buckets_looked_up": profile.replayer.memo_hits, "candidate_lists": search.size,
            "programme_cells": search.cells}
    return Advice(mode=mode, budget_bytes=budget, buckets=chosen, predicted_bytes=cost, high_bytes=high,
                  expected_padding_pct=round(pct, 4), curve=curve, lengths_source=source,
                  notes=notes, low_bytes=final.low_bytes, exact=final.exact, band_source=final.band_source, work=work,
                  needs_free_bytes=final.headroom.needs_free_bytes if final.headroom else None, free_bytes=free)


BAND_LENGTHS = (1, 3, 8, 20, 50)  # list lengths at which the band's growth per bucket is charged
IMPROVE_ROUNDS = 8  # moves tried from the best candidate (each round: add one bucket, or move one to a neighbour)
IMPROVE_TRIES = 24  # moves a round predicts (in order of padding, those bounds leave) before it gives up


class _Search:
    """The candidate lists, each known by its expected padding and a bound on its prediction, replayed only
    when a choice depends on it.

    A list's bound (its prediction's top can only be higher) is: the first bucket's costs outside the pool,
    the pool after its two largest buckets, or the bytes its buckets allocate and never free if more (no
    later bucket shrinks the pool, and those bytes are all in it at the end), every later bucket's torch
    memory outside the pool and executables, and the band's top. A list whose bound is above a budget
    cannot fit it and is never replayed; one that is replayed stops once its pool passes what the budget
    leaves it, and that pool becomes its floor. A list is built from the programme's back-pointers only
    when it is replayed. Choices are those of predicting every list: the least padding within the budget,
    ties broken by the lower top of the band, then the list.
    """

    def __init__(self, mode: str, profile: BucketProfile, predicted, weights: np.ndarray, requested: float,
                 candidates: list[int], later: dict, alone: ModePrediction, pair_pool: dict[int, int],
                 free: Optional[int] = None):
        self.mode, self.predicted, self.replayer = mode, predicted, profile.replayer
        self.free = free  # the second constraint: the free memory the capture may need
        self.weights, self.requested, self.padding = weights, requested, _Padding(weights)
        self.candidates = candidates
        top = candidates[-1]
        first = alone.buckets[0]
        self.fixed_bytes = first.outside_pool_delta_bytes + first.non_torch_delta_bytes
        self.alone_pool = alone.pool_bytes
        self.pair_pool = pair_pool
        self.outside = {b: later[b].outside_pool_delta_bytes + later[b].non_torch_delta_bytes for b in candidates[:-1]}
        self.kept = {b: self.replayer.kept[mode][b] for b in candidates[:-1]}  # later buckets: the mode's own trace
        self.kept_first = self.replayer.kept_bytes(mode, [top])
        self.band = np.array([0] + [list_band(profile, mode, k) for k in range(1, len(candidates) + 1)],
                             dtype=np.int64)
        self._pct: list[np.ndarray] = []
        self._bound: list[np.ndarray] = []
        self._makers: list = []  # each part's list builder: index -> the list (ascending)
        self._table: Optional[tuple[np.ndarray, ...]] = None
        self._built: dict[int, tuple[int, ...]] = {}  # entry (in the table's order) -> its list
        self.exact: dict[tuple[int, ...], tuple[int, int]] = {}  # list -> (predicted bytes, top of the band)
        self.floor: dict[tuple[int, ...], int] = {}  # list -> its pool is above this (a replay stopped there)
        self.replayed = 0  # lists replayed to decide whether they fit
        self.cells = 0  # the programmes' (bucket, budget) cells

    @property
    def size(self) -> int:
        return sum(len(p) for p in self._pct)

    # ------------------------------------------------------------ candidates

    def _add(self, pct: Sequence[float] | np.ndarray, bound: Sequence[int] | np.ndarray, maker) -> None:
        self._pct.append(np.asarray(pct, dtype=float))
        self._bound.append(np.asarray(bound, dtype=np.int64))
        self._makers.append(maker)
        self._table = None

    def pct_of(self, buckets: Sequence[int]) -> float:
        return padding_pct(buckets, self.weights, self.requested)

    def bound_of(self, chosen: tuple[int, ...]) -> int:
        """At most the top of the list's prediction (the class docstring)."""
        below = chosen[:-1]
        pool = max(self.pair_pool[chosen[-2]] if below else self.alone_pool,
                   self.kept_first + sum(self.kept[b] for b in below))
        return self.fixed_bytes + pool + int(self.band[len(chosen)]) + sum(self.outside[b] for b in below)

    def add_lists(self, lists: Sequence[tuple[int, ...]]) -> None:
        lists = list(lists)
        self._add([self.pct_of(t) for t in lists], [self.bound_of(t) for t in lists], lists.__getitem__)

    def reach(self, pool: list[int], costs: Sequence[int], budget: int) -> int:
        """The most units a list drawn from ``pool`` can cost under ``costs`` and still have a bound within
        ``budget``: above it, every list's bound is above the budget, so no list the programme would find there
        can fit. A list's bound is at least its first bucket's costs, the band's least, and both the pool
        alone (with every later bucket's costs outside the pool) and the bytes its buckets never free (with the
        same): each gives a knapsack whose fractional optimum bounds the units."""
        below = pool[:-1]
        least = self.fixed_bytes + int(self.band[1:].min())
        outside = [self.outside[b] for b in below]
        with_kept = [self.outside[b] + self.kept[b] for b in below]
        most = min(_most_units(costs[:-1], outside, budget - least - self.alone_pool),
                   _most_units(costs[:-1], with_kept, budget - least - self.kept_first))
        return min(sum(int(c) for c in costs), math.ceil(most))

    def add_programme(self, pool: list[int], costs: Sequence[int], units: int) -> None:
        """The lists optimal under additive ``costs`` for every budget up to ``units`` (:func:`pareto_lists`), with
        their paddings and bounds read along the programme's back-pointers, unbuilt."""
        units = max(0, min(units, sum(int(c) for c in costs)))
        self.cells += len(pool) * (units + 1)
        best, back = _programme(pool, costs, units, self.weights)
        row = best[-1]
        levels = _levels(row)
        del best
        paths = _paths(costs, back, levels)
        del back
        below = paths[1:].astype(np.int64)
        on = below >= 0
        at = np.where(on, below, 0)
        outside = np.array([self.outside[b] for b in pool[:-1]] + [0], dtype=np.int64)
        kept = np.array([self.kept[b] for b in pool[:-1]] + [0], dtype=np.int64)
        pairs = np.array([self.pair_pool[b] for b in pool[:-1]] + [self.alone_pool], dtype=np.int64)
        second = np.where(on[0], at[0], len(pool) - 1) if len(below) else np.full(len(levels), len(pool) - 1)
        pooled = np.maximum(pairs[second], self.kept_first + (kept[at] * on).sum(axis=0))
        bound = self.fixed_bytes + pooled + self.band[on.sum(axis=0) + 1] + (outside[at] * on).sum(axis=0)
        pct = 100.0 * row[levels] / self.requested if self.requested else np.zeros(len(levels))
        cand = np.asarray(pool)

        def make(i: int) -> tuple[int, ...]:
            column = paths[:, i]
            return tuple(int(b) for b in cand[column[column >= 0][::-1]])

        self._add(pct, bound, make)

    def _sorted(self) -> tuple[np.ndarray, ...]:
        if self._table is None:
            pct, bound = np.concatenate(self._pct), np.concatenate(self._bound)
            part = np.concatenate([np.full(len(p), k) for k, p in enumerate(self._pct)])
            index = np.concatenate([np.arange(len(p)) for p in self._pct])
            order = np.argsort(pct, kind="stable")
            self._table = (pct[order], bound[order], part[order], index[order])
            self._built = {}
        return self._table

    def _list(self, e: int) -> tuple[int, ...]:
        found = self._built.get(e)
        if found is None:
            _, _, part, index = self._sorted()
            found = self._built[e] = self._makers[int(part[e])](int(index[e]))
        return found

    # ------------------------------------------------------------ predictions

    def _exact(self, chosen: tuple[int, ...]) -> tuple[int, int]:
        if chosen not in self.exact:
            m = self.predicted(chosen)
            self.exact[chosen] = (m.device_used_bytes, m.high_bytes)
        return self.exact[chosen]

    def _fits(self, chosen: tuple[int, ...], budget: int) -> Optional[tuple[int, int]]:
        """The exact prediction when the list fits ``budget``; None when it cannot. Its top is its pool plus costs
        known without a replay, so the pool is replayed only until it leaves no room (it never falls), and the
        pool reached then is kept as the list's floor."""
        if chosen in self.exact:
            return self.exact[chosen]
        below = chosen[:-1]
        rest = self.fixed_bytes + int(self.band[len(chosen)]) + sum(self.outside[b] for b in below)
        floor = self.floor.get(chosen)
        if floor is None:
            floor = max(self.pair_pool[chosen[-2]] if below else self.alone_pool,
                        self.kept_first + sum(self.kept[b] for b in below))
        if rest + floor > budget:
            return None
        self.replayed += 1
        within, pool = self.replayer.pool_within(self.mode, chosen, budget - rest)
        if not within:
            self.floor[chosen] = pool
            return None
        return self._exact(chosen)

    def _captures_with_free(self, chosen: tuple[int, ...]) -> bool:
        """With a free-memory constraint, whether the list's need (replayed, as predict --free gives it) is
        within it; the prediction is the one the budget check made, so this costs no replay."""
        if self.free is None:
            return True
        h = self.predicted(chosen).headroom
        return h is not None and h.needs_free_bytes <= self.free

    def _least_fitting(self, lists: Sequence[tuple[int, ...]], budget: int) -> Optional[tuple[int, tuple[int, ...]]]:
        """(top of the band, list) of the one with the lowest top within ``budget``, the list breaking ties."""
        fitting = []
        for chosen in lists:
            exact = self._fits(chosen, budget)
            if exact is not None and exact[1] <= budget and self._captures_with_free(chosen):
                fitting.append((exact[1], chosen))
        return min(fitting) if fitting else None

    def best_within(self, budget: int) -> Optional[tuple[int, int, float, list[int]]]:
        """(predicted bytes, top of the band, padding %, list) of the least padded list within ``budget``."""
        pct, bound, _, _ = self._sorted()
        near = np.flatnonzero(bound <= budget)  # in padding order; the others cannot fit
        i = 0
        while i < len(near):
            p = pct[near[i]]
            j = i + 1
            while j < len(near) and pct[near[j]] == p:
                j += 1
            found = self._least_fitting([self._list(int(e)) for e in near[i:j]], budget)
            if found is not None:
                high, chosen = found
                return self.exact[chosen][0], high, float(p), list(chosen)
            i = j
        return None

    def improve(self, best: tuple[int, int, float, list[int]], budget: int) -> tuple[int, int, float, list[int]]:
        """Local moves from ``best`` while one pads less and fits: add a bucket, or move one to a neighbouring
        candidate (the additive cost models that proposed the candidates cannot see every interaction). Each
        round's moves (O(candidates)) are scored in O(1) each; the least padded that fits is taken, ties broken
        as in :meth:`best_within`."""
        for _ in range(IMPROVE_ROUNDS):
            current = best[3]
            moves, pads, bounds = self._moves(current)
            if not moves:
                return best
            pct = 100.0 * np.array(pads) / self.requested if self.requested else np.zeros(len(pads))
            base = tuple(current)

            def make(i: int, moves=moves, base=base) -> tuple[int, ...]:
                x, y = moves[i]
                return tuple(sorted([*(b for b in base if b != x), y]))

            self._add(pct, bounds, make)
            better = np.flatnonzero((pct < best[2]) & (np.array(bounds) <= budget))
            better = better[np.argsort(pct[better], kind="stable")]
            found = None
            tried = self.replayed
            i = 0
            while i < len(better) and self.replayed - tried < IMPROVE_TRIES:
                j = i + 1
                while j < len(better) and pct[better[j]] == pct[better[i]]:
                    j += 1
                least = self._least_fitting([make(int(e)) for e in better[i:j]], budget)
                if least is not None:
                    high, chosen = least
                    found = (self.exact[chosen][0], high, float(pct[better[i]]), list(chosen))
                    break
                i = j
            if found is None:
                return best
            best = found
        return best

    def _moves(self, current: list[int]) -> tuple[list[tuple[Optional[int], int]], list[float], list[int]]:
        """Every move from ``current``: (bucket taken out or None, bucket put in), with the padding and bound of
        the list it makes, from ``current``'s in O(1) a move."""
        candidates, pad = self.candidates, self.padding.pad
        members = set(current)
        total = self.padding.of(current)
        outside = sum(self.outside[b] for b in current[:-1])
        kept = sum(self.kept[b] for b in current[:-1])
        second = current[-2] if len(current) > 1 else None
        where = {b: i for i, b in enumerate(current)}
        moves: list[tuple[Optional[int], int]] = []
        pads: list[float] = []
        bounds: list[int] = []

        def score(x: Optional[int], y: int, p: float, size: int, out: int, keep: int, two: Optional[int]) -> None:
            pool = max(self.pair_pool[two] if two is not None else self.alone_pool, self.kept_first + keep)
            moves.append((x, y))
            pads.append(p)
            bounds.append(self.fixed_bytes + pool + int(self.band[size]) + out)

        for i, y in enumerate(candidates):
            if y in members:
                continue
            k = bisect_left(current, y)  # y lies between current[k - 1] and current[k]
            lo, hi = current[k - 1] if k else 0, current[k]
            score(None, y, total - pad(lo, hi) + pad(lo, y) + pad(y, hi), len(current) + 1,
                  outside + self.outside[y], kept + self.kept[y], y if second is None or y > second else second)
            for x in (candidates[i - 1] if i else None, candidates[i + 1]):  # a neighbouring bucket moves to y
                if x is None or x not in members or x == candidates[-1]:
                    continue
                at = where[x]
                below, above = current[at - 1] if at else 0, current[at + 1]
                score(x, y, total - pad(below, x) - pad(x, above) + pad(below, y) + pad(y, above), len(current),
                      outside - self.outside[x] + self.outside[y], kept - self.kept[x] + self.kept[y],
                      y if x == second else second)
        return moves, pads, bounds

    def curve(self, points: int, budget: int) -> list[tuple[int, float, int]]:
        """Budget against least padding (exact predictions, band included), from the cheapest list to the least
        padded one, or to the budget when that one is above it (the search reaches no further)."""
        pct, bound, _, _ = self._sorted()
        lo = None
        for e in np.argsort(bound, kind="stable"):  # the cheapest list: bounds rise, stop past it
            if lo is not None and bound[e] > lo:
                break
            high = self._exact(self._list(int(e)))[1]
            lo = high if lo is None else min(lo, high)
        assert lo is not None
        hi = budget
        least = np.flatnonzero(pct == pct[0])
        for e in least[np.argsort(bound[least], kind="stable")]:
            if bound[e] >= hi:
                break
            hi = min(hi, self._exact(self._list(int(e)))[1])
        out: list[tuple[int, float, int]] = []
        for k in range(points):
            b = round(lo + (hi - lo) * k / max(points - 1, 1))
            best = self.best_within(b)
            if best is None:
                continue
            _, _, p, picked = best
            if not out or p < out[-1][1]:
                out.append((b, p, len(picked)))
        return out


def advice_json(advice: Advice) -> dict:
    """The JSON contract of `bcgprof advise -f json` (plus the curve and notes)."""
    return {"buckets": advice.buckets, "spec": advice.spec, "mode": advice.mode,
            "predicted_bytes": advice.predicted_bytes, "predicted_high_bytes": advice.high_bytes,
            "predicted_low_bytes": advice.low_bytes, "margin_bytes": advice.margin_bytes, "exact": advice.exact,
            "band_source": advice.band_source,
            "expected_padding_pct": advice.expected_padding_pct,
            "needs_free_bytes": advice.needs_free_bytes, "free_bytes": advice.free_bytes,
            "free_margin_bytes": advice.free_margin_bytes,
            "budget_bytes": advice.budget_bytes, "lengths": advice.lengths_source, "label": "predicted, not measured",
            "curve": [{"budget_bytes": b, "expected_padding_pct": round(p, 4), "buckets": n}
                      for b, p, n in advice.curve],
            "notes": advice.notes}


__all__ = ["Advice", "AdviceError", "PredictionError", "advice_json", "advise", "brute_force", "optimise",
           "padding_of", "pareto_lists", "read_lengths"]
