"""Skipping the repeated layers of a bucket's replay without changing its result.

A forward's events repeat layer after layer. Write each event as a code that says what the
allocator sees: an allocation's (requested bytes, stream, how many events later it is
freed), a free's (how many events earlier its block was allocated). When the codes repeat
with period ``P`` over a region (:func:`find_period`), and the pool's state at two
consecutive period starts is the same up to renaming (:func:`signature`: the same segments,
the same free blocks, and live blocks at the same addresses that will be freed the same
number of events later) at two period starts ``q`` periods apart (layers often alternate
between two layouts: ``q`` = 2), every ``q`` periods after that do exactly what those did: the
allocator decides on sizes, addresses and which block a free names, and those repeat. The
replay then jumps to the region's end and renames the live blocks (:func:`rename`): the
state there is the state it had, with each block freed ``shift`` events later.

That is an induction on the periods, checked at run time, so a jump is only taken where it is
exact; where the states never repeat (a pool that grows layer by layer, say) nothing is
skipped. Codes use the distance to the free both ways, so a block's lifetime repeats with
the period too. Costs: :func:`find_period` is linear in the events per candidate period (a
few candidates, numpy); :func:`signature` is linear in the live and free blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import numpy as np

from bcgprof.analysis.predict.allocator import ALLOC, FREE

CANDIDATES = 12  # periods tried: the most common distances between repeats of one code
MIN_PERIODS = 3  # a region must repeat at least this often to be worth folding


def free_index(ops: list) -> dict:
    """Event key -> index of the op that frees it, within ``ops``."""
    return {op[1]: i for i, op in enumerate(ops) if op[0] == FREE}


def find_period(ops: list, frees: dict) -> Optional[tuple[int, int, int]]:
    """``(start, run, period)``: ``code[i] == code[i + period]`` for every ``i`` in ``[start, start
    + run)``, the longest such region over a few candidate periods; None when nothing repeats
    ``MIN_PERIODS`` times.
    ``frees``: :func:`free_index` of ``ops`` (the codes are found from the ops alone)."""
    n = len(ops)
    if n < 2 * MIN_PERIODS:
        return None
    # keys can pass 64 bits (interpolated buckets'): numbered in their order instead
    number: dict = {}
    columns = np.array(
        [
            (ALLOC, op[1], op[2], number.setdefault(op[3], len(number)))
            if op[0] == ALLOC
            else (FREE, 0, 0, number.setdefault(op[1], len(number)))
            for op in ops
        ],
        dtype=np.int64,
    )
    return find_period_arrays(columns[:, 0], columns[:, 1], columns[:, 2], columns[:, 3])


def find_period_arrays(
    kind: np.ndarray, size: np.ndarray, stream: np.ndarray, key: np.ndarray
) -> Optional[tuple[int, int, int]]:
    """:func:`find_period` of ops given as columns (``kind``: ALLOC or FREE; ``size``, ``stream``:
    an allocation's; ``key``: the event key an op allocates or frees). An allocation's code is (its
    size, stream, how many events later its key is freed, if it is), a free's (how many events
    earlier its key was allocated), or a code of its own where the ops do not allocate it; the same
    codes as interning them one by one."""
    n = len(kind)
    if n < 2 * MIN_PERIODS:
        return None
    index = np.arange(n)
    alloc = kind == ALLOC
    later = _last_index(key[~alloc], index[~alloc], key)  # each key's last free (-1: none)
    earlier = _last_index(key[alloc], index[alloc], key)  # each key's last allocation (-1: none)
    other = np.where(alloc, later, earlier)  # the op at the key's other end (-1: none here)
    distance = np.where(other < 0, 0, np.where(alloc, other - index, index - other))
    own = np.where(~alloc & (earlier < 0), key, -1)  # a free from elsewhere never repeats
    # kind, whether the other end is here and the distance to it, as one number
    ends = distance * 4 + (kind == ALLOC) * 2 + (other < 0)
    columns = (ends, np.where(alloc, size, 0), np.where(alloc, stream, 0), own)
    by_code = np.lexsort(columns[::-1])
    new_code = np.zeros(n, dtype=bool)
    for c in columns:
        ordered = c[by_code]
        new_code[1:] |= ordered[1:] != ordered[:-1]
    codes = np.empty(n, dtype=np.int64)
    codes[by_code] = np.cumsum(new_code)  # equal codes for equal columns
    # each code's events in order (a stable sort keeps them so): the one before is its last repeat
    order = _stable_order(codes)
    same = codes[order][1:] == codes[order][:-1]
    gap_at = order[1:][same]
    gaps = np.empty(n, dtype=np.int64)
    gaps[gap_at] = gap_at - order[:-1][same]
    seen = np.zeros(n, dtype=bool)
    seen[gap_at] = True
    found = gaps[seen]  # in event order, as a counter would meet them
    values, first, counts = np.unique(found, return_index=True, return_counts=True)
    # most common first, ties by first seen
    candidates = values[np.lexsort((first, -counts))][:CANDIDATES]
    best: Optional[tuple[int, int, int]] = None
    for period in candidates.tolist():
        if period * MIN_PERIODS > n:
            continue
        same = np.concatenate(([False], codes[:-period] == codes[period:], [False]))
        edges = np.flatnonzero(same[1:] != same[:-1])  # run starts and ends, alternating
        if len(edges) < 2:
            continue
        lengths = edges[1::2] - edges[::2]
        k = int(np.argmax(lengths))
        run, start = int(lengths[k]), int(edges[2 * k])
        if run // period + 1 < MIN_PERIODS:
            continue
        if (
            best is None
            or run // period > best[1] // best[2]
            or (run // period == best[1] // best[2] and run > best[1])
        ):
            best = (start, run, period)
    return best


def _last_index(keys: np.ndarray, at: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each ``wanted`` key, the last of ``at`` (ascending) where ``keys`` holds it (-1 where
    none does)."""
    out = np.full(len(wanted), -1, dtype=np.int64)
    if not len(keys):
        return out
    low = keys.min()
    span = int(keys.max()) - int(low) + 1
    if span <= 4 * len(keys) + 4096:  # a bucket's own keys: a table of them, the last the largest
        table = np.full(span, -1, dtype=np.int64)
        np.maximum.at(table, keys - low, at)
        place = wanted - low
        inside = (place >= 0) & (place < span)
        out[inside] = table[place[inside]]
        return out
    order = _stable_order(keys)  # ``at`` ascends: a key's positions stay in order
    keys, at = keys[order], at[order]
    last = np.r_[keys[1:] != keys[:-1], True]  # each key's last position
    keys, at = keys[last], at[last]
    where = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    hit = keys[where] == wanted
    out[hit] = at[where[hit]]
    return out


def _stable_order(values: np.ndarray) -> np.ndarray:
    """The order that sorts ``values``, equal ones kept in their order: numpy's radix sort where
    they span fewer than 2**16 numbers (a bucket's keys and codes mostly do), else its merge sort;
    the same order either way."""
    if len(values) and int(values.max()) - int(values.min()) < 1 << 16:
        return np.argsort((values - values.min()).astype(np.uint16), kind="stable")
    return np.argsort(values, kind="stable")


def boundaries(fold: tuple[int, int, int]) -> tuple[list[int], int]:
    """The period starts of a region, and where its last period ends."""
    start, run, period = fold
    count = run // period
    return [start + j * period for j in range(count + 1)], start + (count + 1) * period


def signature(layout: tuple, live: dict, frees: dict, at: int, end: int) -> tuple:
    """The state at event ``at`` up to renaming: the pool's layout, and each live block's address
    with how many events later it is freed; a block freed only after the region's ``end`` (or never
    in this bucket) takes no part in it and is marked by its own key."""
    marks = []
    for key, addr in live.items():
        f = frees.get(key)
        marks.append((addr, f - at) if f is not None and f < end else (addr, -1, key))
    marks.sort()
    return layout, tuple(marks)


def rename(ops: Sequence, live: dict, frees: dict, shift: int, end: int) -> Optional[dict]:
    """The live map ``shift`` events later in an equivalent state (blocks freed after ``end`` keep
    their keys); None if an op there is not the free it must be (the jump is then not taken)."""
    out = {}
    for key, addr in live.items():
        f = frees.get(key)
        if f is None or f >= end:
            out[key] = addr
            continue
        g = f + shift
        if g >= len(ops) or ops[g][0] != FREE:
            return None
        out[ops[g][1]] = addr
    return out
