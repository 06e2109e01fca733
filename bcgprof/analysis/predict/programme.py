"""The dynamic programmes behind `bcgprof advise`: over sorted candidate buckets, for every
budget in whole units (MiB), the list with the least padding when each bucket costs a fixed
amount on top of the largest bucket alone (which every list keeps: it is the chunk size).

:func:`programme` is O(n * units) for integer weights (:func:`hull_programme`, the convex hull
trick, one hull per budget, vectorised over the budgets) and the O(n^2 * units) table otherwise
(:func:`table_programme`), with the same lists, ties included. :func:`padding_levels` and
:func:`level_lists` read every list of the trade-off curve from the back-pointers at once;
:func:`optimise`, :func:`pareto_lists` and :func:`brute_force` answer one budget, every budget,
and (for tests) the same by trying every subset. :func:`most_units` bounds what a set of
buckets can cost within a room (the fractional knapsack).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

import numpy as np

from bcgprof.analysis.predict.padding import padding_of, padding_table


def programme(
    cand: list[int], costs: Sequence[int], units: int, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """best[j][u]: least padding of counts <= cand[j] with cand[j] chosen, spending at most u units
    on the chosen buckets below the largest; back[j][u]: the chosen bucket before j (-1: none; -2:
    out of reach). Ties go to the earliest bucket before j (none first). Integer weights (counts:
    what advise passes) take
    :func:`hull_programme`, O(n * units); others the O(n^2 * units) table, with the same results."""
    if exact_counts(cand, weights):
        return hull_programme(cand, costs, units, weights)
    return table_programme(cand, costs, units, weights)


def table_programme(
    cand: list[int], costs: Sequence[int], units: int, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    n = len(cand)
    pad = padding_table(cand, weights)
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


EXACT_INTERCEPT = 2**48  # the hull's lines: intercepts and slopes below these, and buckets below
EXACT_SLOPE = 2**27  # EXACT_BUCKET, keep every comparison exact in float64
EXACT_BUCKET = 2**21


def exact_counts(cand: Sequence[int], weights: np.ndarray) -> bool:
    """Whether the weights are counts small enough for :func:`hull_programme`'s exact arithmetic
    (every count bcgprof accepts: at most 50 million lengths, buckets up to 2^20 tokens)."""
    w = np.asarray(weights[: cand[-1] + 1], dtype=float)
    if cand[-1] >= EXACT_BUCKET or np.any(w < 0) or np.any(w != np.floor(w)):
        return False
    total = float(w.sum())
    tokens = float(np.dot(w, np.arange(len(w), dtype=float)))
    return total < EXACT_SLOPE and cand[-1] * total + tokens < EXACT_INTERCEPT


def hull_programme(
    cand: list[int], costs: Sequence[int], units: int, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`programme` in O(n * units) amortised (the convex hull trick, one hull per budget).

    The padding of a gap below bucket ``x`` is ``K(x) + A_i - x * B_i``: ``K`` depends on the bucket
    only,
    ``A_i`` is the least padding up to candidate ``i`` (for the budget) plus ``T`` there, ``B_i`` is
    ``W`` there. So for each budget the best bucket before ``x`` is the lowest of the lines ``A_i -
    x * B_i`` at
    ``x``. Buckets come in rising order and lines in rising ``B``, so each budget keeps the lower
    hull of its lines in a deque, each line with the first bucket (row) at which it is strictly
    below the line before it: a row drops from the front the lines that start below their successor
    by then, and a new line drops from the back the lines it starts below no later than they start
    below theirs (they can never be the first least again). Each line joins and leaves each budget's
    hull at most once. Ties go to the earlier line, as in :func:`table_programme`; every figure is
    an integer below 2^53 (see
    :func:`exact_counts`), so values, rows and ties are exactly the table's. Vectorised over the
    budgets.
    """
    n, width = len(cand), units + 1
    cw = np.cumsum(weights)
    ct = np.cumsum(weights * np.arange(len(weights), dtype=float))
    lo = np.array([0] + list(cand[:-1]))
    slope, offset = cw[lo], ct[lo]  # line r is candidate r - 1 (r = 0: nothing below)
    xs = np.asarray(cand, dtype=float)
    # row r: line r's least padding for each budget (row 0: nothing, 0)
    best = np.full((n + 1, width), np.inf)
    best[0] = 0.0
    flat = best.reshape(-1)
    back = np.full((n, width), -2, dtype=np.int32)
    # budget w's hull: its lines at p * width + w, head <= p < tail
    hull = np.zeros((n + 1) * width, dtype=np.int32)
    # the row from which each is below the one before it (n: never)
    start = np.zeros((n + 1) * width, dtype=np.int32)
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
        best[j + 1, c:] = flat[line * stride + budgets[:m]] + (
            x * (cw[x] - slope[line]) - (ct[x] - offset[line])
        )
        back[j, c:] = line - 1
        if j == n - 1:
            break
        r = j + 1  # the new line, in every budget it reaches
        a_new, b_new = best[r, c:] + offset[r], slope[r]
        # the row from which it is below the hull's last line
        first = np.empty(width - c, dtype=np.int64)
        act: Optional[np.ndarray]
        # act: the budgets still looking, as positions in lay (None: all)
        lay, act = budgets[c:], None
        while True:  # the back
            at = tail[lay] - width
            last = hull[at]
            da = (a_new if act is None else a_new[act]) - (flat[last * stride + lay] + offset[last])
            db = b_new - slope[last]
            # below it at x when x * db > da: rows past da / db (exact: see exact_counts); parallel:
            # never or from
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


def list_at(cand: list[int], costs: Sequence[int], back: np.ndarray, u: int) -> list[int]:
    """The list the programme chose with ``u`` units: the largest bucket, then back to the
    smallest."""
    last = len(cand) - 1
    chosen, j = [], last
    while j >= 0:
        chosen.append(cand[j])
        i = int(back[j, u])
        u -= 0 if j == last else int(costs[j])
        j = i
    return sorted(chosen)


def padding_levels(row: np.ndarray) -> np.ndarray:
    """The units where the least padding falls (and is reached): one list each."""
    levels = np.flatnonzero(np.concatenate(([True], row[1:] < row[:-1])))
    return levels[np.isfinite(row[levels])]


def level_lists(costs: Sequence[int], back: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """:func:`list_at` of every level at once: row s holds each list's s-th bucket from the largest
    down (as a candidate index; -1 past its smallest)."""
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
    return np.array(rows[:-1], dtype=np.int16 if last < 2**15 else np.int32)


def optimise(
    candidates: Sequence[int], costs: Sequence[int], fixed: int, budget: int, weights: np.ndarray
) -> tuple[Optional[list[int]], np.ndarray]:
    """Least padding subject to ``fixed + sum(costs of chosen) <= budget`` (costs in MiB, the last
    candidate always chosen and its cost in ``fixed``). Returns the chosen buckets (None if nothing
    fits) and the best padding for every budget fixed..budget (the trade-off curve, indexed by units
    above ``fixed``)."""
    cand = list(candidates)
    units = budget - fixed
    if units < 0:
        return None, np.full(max(budget + 1, 1), np.inf)
    best, back = programme(cand, costs, units, weights)
    row = best[-1]  # at most u units: falls as u grows
    if not np.isfinite(row[units]):
        return None, row
    u = int(np.flatnonzero(row <= row.min())[0])  # the cheapest way to the least padding
    return list_at(cand, costs, back, u), row


def pareto_lists(
    candidates: Sequence[int],
    costs: Sequence[int],
    fixed: int,
    weights: np.ndarray,
    units: Optional[int] = None,
) -> list[list[int]]:
    """Every list that is optimal (least padding) for some budget under additive ``costs`` (MiB),
    cheapest first: one per padding level of the trade-off curve; with ``units``, those costing at
    most that (the same lists: the programme up to ``u`` units does not depend on what lies
    above)."""
    cand = list(candidates)
    total = sum(int(c) for c in costs)
    best, back = programme(
        cand, costs, total if units is None else max(0, min(units, total)), weights
    )
    return [list_at(cand, costs, back, int(u)) for u in padding_levels(best[-1])]


def brute_force(
    candidates: Sequence[int], costs: Sequence[int], fixed: int, budget: int, weights: np.ndarray
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


def most_units(costs: Sequence[int], weights: Sequence[int], room: float) -> float:
    """The most ``costs`` a set of buckets whose ``weights`` add up to at most ``room`` can add up
    to: the fractional knapsack's optimum, an upper bound on any set's (weights at most 0 are taken,
    and give room)."""
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
