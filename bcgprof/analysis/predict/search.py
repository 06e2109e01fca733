"""advise's search: the least-padding list of profiled buckets whose exact prediction fits a budget.

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
model and still have a bound within the budget (:meth:`Search.reach`): above that no list
can fit. A list whose bound is above a budget is never built nor replayed, and a replay stops
as soon as the pool leaves no room (:meth:`bcgprof.analysis.predict.replay.Replayer.pool_within`).

Complexity, for ``n`` profiled buckets, ``U`` units (MiB) a programme reaches (about the
budget above the largest bucket alone; more for a model that charges each bucket its output,
which the largest bucket's freed space absorbs) and lists of ``k`` buckets of ``E`` allocator
events each:

* each programme (:mod:`bcgprof.analysis.predict.programme`): O(n U) time and memory (one convex
hull of
  lines a budget, each line joining and leaving it once, vectorised over the budgets; the O(n^2 U)
  table it replaces gives the same lists, ties included); its O(U) lists are read along its
  back-pointers with their paddings and bounds, O(U k), and built only when replayed;
* each prediction: O(k E log) for the replay, each allocator step bisecting the free lists
  and segments, less the leading buckets it shares with a list replayed before (a prefix tree
  keeps their pools and states), and a bucket replayed before from a pool of the same content
  is looked up instead (the pool of a mode whose buckets free what they allocate comes back
  to the same few free segments); setting up costs 2n - 1 bucket replays (the whole list, none
  when the trace's check replayed it in the same command, and each bucket captured after the
  largest); a list or programme an earlier advise on the same traces worked out is read from the
  cache (:mod:`bcgprof.analysis.predict.kept_replays`);
* the choice at a budget replays the lists its answer depends on (bound within the budget,
  padding below the answer's); the last step scores each round's O(n) moves in O(1) each and
  replays at most :data:`IMPROVE_TRIES` a round; the trade-off curve repeats the choice at
  12 budgets, from the cheapest list to the least padded one within the budget.

``benchmarks/advise_scaling.py`` times it on 256 to 4,096 buckets; docs/evidence-predict.md gives
the work it does on a committed profile.
"""

from __future__ import annotations

import base64
import binascii
import math
from bisect import bisect_left
from collections.abc import Sequence
from typing import Optional

import numpy as np

from bcgprof.analysis.predict import trace_cache
from bcgprof.analysis.predict.lists import BucketProfile, list_band
from bcgprof.analysis.predict.needs_free import warmup_cache_bytes
from bcgprof.analysis.predict.padding import Padding, padding_pct
from bcgprof.analysis.predict.prediction import ModePrediction
from bcgprof.analysis.predict.programme import (
    level_lists,
    most_units,
    padding_levels,
    programme,
)

MIB = 1 << 20


BAND_LENGTHS = (1, 3, 8, 20, 50)  # list lengths at which the band's growth per bucket is charged
# moves tried from the best candidate (each round: add one bucket, or move one to a neighbour)
IMPROVE_ROUNDS = 8
# moves a round predicts (in order of padding, those bounds leave) before it gives up
IMPROVE_TRIES = 24


class Search:
    """The candidate lists, each known by its expected padding and a bound on its prediction,
    replayed only when a choice depends on it.

    A list's bound (its prediction's top can only be higher) is: the first bucket's costs outside
    the pool, the pool after its two largest buckets, or the bytes its buckets allocate and never
    free if more (no later bucket shrinks the pool, and those bytes are all in it at the end), every
    later bucket's torch memory outside the pool and executables, and the band's top. A list whose
    bound is above a budget cannot fit it and is never replayed; one that is replayed stops once its
    pool passes what the budget leaves it, and that pool becomes its floor. A list is built from the
    programme's back-pointers only when it is replayed. Choices are those of predicting every list:
    the least padding within the budget, ties broken by the lower top of the band, then the list.
    """

    def __init__(
        self,
        mode: str,
        profile: BucketProfile,
        predicted,
        weights: np.ndarray,
        requested: float,
        candidates: list[int],
        later: dict,
        alone: ModePrediction,
        pair_pool: dict[int, int],
        free: Optional[int] = None,
    ):
        self.mode, self.predicted, self.replayer = mode, predicted, profile.replayer
        self.free = free  # the second constraint: the free memory the capture may need
        self.weights, self.requested, self.padding = weights, requested, Padding(weights)
        self.candidates = candidates
        top = candidates[-1]
        first = alone.buckets[0]
        self.fixed_bytes = first.outside_pool_delta_bytes + first.non_torch_delta_bytes
        self.alone_pool = alone.pool_bytes
        self.pair_pool = pair_pool
        self.outside = {
            b: later[b].outside_pool_delta_bytes + later[b].non_torch_delta_bytes
            for b in candidates[:-1]
        }
        # later buckets: the mode's own trace
        self.kept = {b: self.replayer.bucket_sources.kept[mode][b] for b in candidates[:-1]}
        self.kept_first = self.replayer.bucket_sources.kept_bytes(mode, [top])
        self.band = np.array(
            [0] + [list_band(profile, mode, k) for k in range(1, len(candidates) + 1)],
            dtype=np.int64,
        )
        self._pct: list[np.ndarray] = []
        self._bound: list[np.ndarray] = []
        self._makers: list = []  # each part's list builder: index -> the list (ascending)
        self._table: Optional[tuple[np.ndarray, ...]] = None
        self._built: dict[int, tuple[int, ...]] = {}  # entry (in the table's order) -> its list
        # list -> (predicted bytes, top of the band)
        self.exact: dict[tuple[int, ...], tuple[int, int]] = {}
        # list -> its pool is above this (a replay stopped there)
        self.floor: dict[tuple[int, ...], int] = {}
        self.cached = _warmup_caches(profile, mode, candidates) if free is not None else None
        # lists whose need, bounded without a replay, is above free
        self.unfree: set[tuple[int, ...]] = set()
        self.replayed = 0  # lists replayed to decide whether they fit
        self.cells = 0  # the programmes' (bucket, budget) cells
        # the programmes' results are kept beside the traces' (none for traces held in memory)
        trace = self.replayer.bucket_sources.traces.get(mode)
        self._near = trace.path if trace is not None and trace.digest else None
        self._weighed = trace_cache.array_key(weights)

    @property
    def size(self) -> int:
        return sum(len(p) for p in self._pct)

    # ------------------------------------------------------------ candidates

    def _add(
        self, pct: Sequence[float] | np.ndarray, bound: Sequence[int] | np.ndarray, maker
    ) -> None:
        self._pct.append(np.asarray(pct, dtype=float))
        self._bound.append(np.asarray(bound, dtype=np.int64))
        self._makers.append(maker)
        self._table = None

    def pct_of(self, buckets: Sequence[int]) -> float:
        return padding_pct(buckets, self.weights, self.requested)

    def bound_of(self, chosen: tuple[int, ...]) -> int:
        """At most the top of the list's prediction (the class docstring)."""
        below = chosen[:-1]
        pool = max(
            self.pair_pool[chosen[-2]] if below else self.alone_pool,
            self.kept_first + sum(self.kept[b] for b in below),
        )
        return (
            self.fixed_bytes
            + pool
            + int(self.band[len(chosen)])
            + sum(self.outside[b] for b in below)
        )

    def add_lists(self, lists: Sequence[tuple[int, ...]]) -> None:
        lists = list(lists)
        self._add(
            [self.pct_of(t) for t in lists], [self.bound_of(t) for t in lists], lists.__getitem__
        )

    def reach(self, pool: list[int], costs: Sequence[int], budget: int) -> int:
        """The most units a list drawn from ``pool`` can cost under ``costs`` and still have a bound
        within
        ``budget``: above it, every list's bound is above the budget, so no list the programme would
        find there can fit. A list's bound is at least its first bucket's costs, the band's least,
        and both the pool alone (with every later bucket's costs outside the pool) and the bytes its
        buckets never free (with the same): each gives a knapsack whose fractional optimum bounds
        the units."""
        below = pool[:-1]
        least = self.fixed_bytes + int(self.band[1:].min())
        outside = [self.outside[b] for b in below]
        with_kept = [self.outside[b] + self.kept[b] for b in below]
        most = min(
            most_units(costs[:-1], outside, budget - least - self.alone_pool),
            most_units(costs[:-1], with_kept, budget - least - self.kept_first),
        )
        return min(sum(int(c) for c in costs), math.ceil(most))

    def add_programme(self, pool: list[int], costs: Sequence[int], units: int) -> None:
        """The lists optimal under additive ``costs`` for every budget up to ``units``
        (:func:`pareto_lists`), with their paddings and bounds read along the programme's
        back-pointers, unbuilt."""
        units = max(0, min(units, sum(int(c) for c in costs)))
        self.cells += len(pool) * (units + 1)
        levels, least, paths = self._programme(pool, costs, units)
        below = paths[1:].astype(np.int64)
        on = below >= 0
        at = np.where(on, below, 0)
        outside = np.array([self.outside[b] for b in pool[:-1]] + [0], dtype=np.int64)
        kept = np.array([self.kept[b] for b in pool[:-1]] + [0], dtype=np.int64)
        pairs = np.array([self.pair_pool[b] for b in pool[:-1]] + [self.alone_pool], dtype=np.int64)
        second = (
            np.where(on[0], at[0], len(pool) - 1)
            if len(below)
            else np.full(len(levels), len(pool) - 1)
        )
        pooled = np.maximum(pairs[second], self.kept_first + (kept[at] * on).sum(axis=0))
        bound = (
            self.fixed_bytes
            + pooled
            + self.band[on.sum(axis=0) + 1]
            + (outside[at] * on).sum(axis=0)
        )
        pct = 100.0 * least / self.requested if self.requested else np.zeros(len(levels))
        cand = np.asarray(pool)

        def make(i: int) -> tuple[int, ...]:
            column = paths[:, i]
            return tuple(cand[column[column >= 0][::-1]].tolist())

        self._add(pct, bound, make)

    def _programme(
        self, pool: list[int], costs: Sequence[int], units: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The programme's padding levels, the least padding at each and the lists there
        (:func:`level_lists`): worked out, or kept by an earlier advise with the same candidates,
        costs, units and weights (:mod:`bcgprof.analysis.predict.trace_cache`)."""
        parts = [[int(b) for b in pool], [int(c) for c in costs], int(units), self._weighed]
        kept = trace_cache.recall("programme", parts, self._near) if self._near else None
        if isinstance(kept, dict):
            try:
                levels = _unpacked(kept["levels"], "<i8")
                least = _unpacked(kept["least"], "<f8")
                if kept["dtype"] not in ("<i2", "<i4"):
                    raise ValueError("not a list of candidates")
                paths = _unpacked(kept["paths"], kept["dtype"]).reshape(kept["shape"])
                if (
                    least.ndim == levels.ndim == 1
                    and len(least) == len(levels) == paths.shape[1]
                    and ((paths >= -1) & (paths < len(pool))).all()
                ):
                    return levels, least, paths
            except (TypeError, KeyError, ValueError, IndexError, binascii.Error):
                pass  # not whole: worked out again
        best, back = programme(pool, costs, units, self.weights)
        row = best[-1]
        levels = padding_levels(row)
        del best
        paths = level_lists(costs, back, levels)
        del back
        least = row[levels]
        if self._near:
            value = {
                "levels": _packed(levels, "<i8"),
                "least": _packed(least, "<f8"),
                "paths": _packed(paths, paths.dtype.str),
                "dtype": paths.dtype.str,
                "shape": list(paths.shape),
            }
            trace_cache.remember("programme", parts, value, self._near)
        return levels, least, paths

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
        """The exact prediction when the list fits ``budget``; None when it cannot. Its top is its
        pool plus costs known without a replay, so the pool is replayed only until it leaves no room
        (it never falls), and the pool reached then is kept as the list's floor."""
        if chosen in self.exact:
            return self.exact[chosen]
        if chosen in self.unfree:
            return None
        below = chosen[:-1]
        rest = self.fixed_bytes + int(self.band[len(chosen)]) + sum(self.outside[b] for b in below)
        floor = self.floor.get(chosen)
        if floor is None:
            floor = max(
                self.pair_pool[chosen[-2]] if below else self.alone_pool,
                self.kept_first + sum(self.kept[b] for b in below),
            )
        if rest + floor > budget:
            return None
        self.replayed += 1
        if self.cached is not None and self._free_floor(chosen) > (self.free or 0):
            self.unfree.add(chosen)  # it cannot capture with the free memory given: not replayed
            return None
        within, pool = self.replayer.pool_within(self.mode, chosen, budget - rest)
        if not within:
            self.floor[chosen] = pool
            return None
        return self._exact(chosen)

    def _free_floor(self, chosen: tuple[int, ...]) -> int:
        """At most the free memory the list needs
        (:attr:`~bcgprof.analysis.predict.needs_free.NeedsFree.needs_free_bytes`:
        the most, over its buckets, of device used after the bucket plus its warm-up's cache), from
        costs known without a replay: device used after a bucket is at least the first bucket's
        costs outside the pool, each later one's so far, and a pool no smaller than the first two
        buckets' or the bytes kept so far."""
        assert self.cached is not None
        order = chosen[-2::-1]  # capture order after the largest
        need = self.fixed_bytes + self.alone_pool + self.cached[chosen[-1]]
        outside, kept = self.fixed_bytes, self.kept_first
        for b in order:
            outside, kept = outside + self.outside[b], kept + self.kept[b]
            need = max(need, outside + max(self.pair_pool[order[0]], kept) + self.cached[b])
        return need

    def _captures_with_free(self, chosen: tuple[int, ...]) -> bool:
        """With a free-memory constraint, whether the list's need (replayed, as predict --free gives
        it) is within it; the prediction is the one the budget check made, so this costs no
        replay."""
        if self.free is None:
            return True
        h = self.predicted(chosen).needs_free
        return h is not None and h.needs_free_bytes <= self.free

    def _least_fitting(
        self, lists: Sequence[tuple[int, ...]], budget: int
    ) -> Optional[tuple[int, tuple[int, ...]]]:
        """(top of the band, list) of the one with the lowest top within ``budget``, the list
        breaking ties."""
        fitting = []
        for chosen in lists:
            exact = self._fits(chosen, budget)
            if exact is not None and exact[1] <= budget and self._captures_with_free(chosen):
                fitting.append((exact[1], chosen))
        return min(fitting) if fitting else None

    def best_within(self, budget: int) -> Optional[tuple[int, int, float, list[int]]]:
        """(predicted bytes, top of the band, padding %, list) of the least padded list within
        ``budget``."""
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

    def improve(
        self, best: tuple[int, int, float, list[int]], budget: int
    ) -> tuple[int, int, float, list[int]]:
        """Local moves from ``best`` while one pads less and fits: add a bucket, or move one to a
        neighbouring candidate (the additive cost models that proposed the candidates cannot see
        every interaction). Each round's moves (O(candidates)) are scored in O(1) each; the least
        padded that fits is taken, ties broken as in :meth:`best_within`."""
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

    def _moves(
        self, current: list[int]
    ) -> tuple[list[tuple[Optional[int], int]], list[float], list[int]]:
        """Every move from ``current``: (bucket taken out or None, bucket put in), with the padding
        and bound of the list it makes, from ``current``'s in O(1) a move."""
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

        def score(
            x: Optional[int], y: int, p: float, size: int, out: int, keep: int, two: Optional[int]
        ) -> None:
            pool = max(
                self.pair_pool[two] if two is not None else self.alone_pool, self.kept_first + keep
            )
            moves.append((x, y))
            pads.append(p)
            bounds.append(self.fixed_bytes + pool + int(self.band[size]) + out)

        for i, y in enumerate(candidates):
            if y in members:
                continue
            k = bisect_left(current, y)  # y lies between current[k - 1] and current[k]
            lo, hi = current[k - 1] if k else 0, current[k]
            score(
                None,
                y,
                total - pad(lo, hi) + pad(lo, y) + pad(y, hi),
                len(current) + 1,
                outside + self.outside[y],
                kept + self.kept[y],
                y if second is None or y > second else second,
            )
            # a neighbouring bucket moves to y
            for x in (candidates[i - 1] if i else None, candidates[i + 1]):
                if x is None or x not in members or x == candidates[-1]:
                    continue
                at = where[x]
                below, above = current[at - 1] if at else 0, current[at + 1]
                score(
                    x,
                    y,
                    total - pad(below, x) - pad(x, above) + pad(below, y) + pad(y, above),
                    len(current),
                    outside - self.outside[x] + self.outside[y],
                    kept - self.kept[x] + self.kept[y],
                    y if x == second else second,
                )
        return moves, pads, bounds

    def curve(self, points: int, budget: int) -> list[tuple[int, float, int]]:
        """Budget against least padding (exact predictions, band included), from the cheapest list
        to the least padded one, or to the budget when that one is above it (the search reaches no
        further)."""
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


def _packed(values: np.ndarray, dtype: str) -> str:
    """An array's values as base64 text of their bytes (``dtype``: little-endian, exact)."""
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode()


def _unpacked(text: str, dtype: str) -> np.ndarray:
    """:func:`_packed`'s array back, one-dimensional (ValueError or TypeError if it is not one)."""
    return np.frombuffer(base64.b64decode(text, validate=True), dtype=dtype).copy()


def _warmup_caches(
    profile: BucketProfile, mode: str, buckets: Sequence[int]
) -> Optional[dict[int, int]]:
    """Each bucket's warm-up cache as the free-memory check counts it (its warm-up's growth less its
    torch memory outside the pool, :func:`bcgprof.analysis.predict.needs_free.traced_needs`); None
    where the traces lack a warm-up."""
    growth, rows = profile.replayer.bucket_sources.warmup.get(mode, {}), profile.rows.get(mode, {})
    out = {}
    for b in buckets:
        g, row = growth.get(b), rows.get(b)
        if g is None or row is None:
            return None
        out[b] = warmup_cache_bytes(g, row.torch_reserved_delta_bytes - row.pool_delta_bytes)
    return out
