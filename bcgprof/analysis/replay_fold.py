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

from collections import Counter
from typing import Optional

import numpy as np

ALLOC, FREE = 0, 1
CANDIDATES = 12  # periods tried: the most common distances between repeats of one code
MIN_PERIODS = 3  # a region must repeat at least this often to be worth folding


def free_index(ops: list) -> dict:
    """Event key -> index of the op that frees it, within ``ops``."""
    return {op[1]: i for i, op in enumerate(ops) if op[0] == FREE}


def find_period(ops: list, frees: dict) -> Optional[tuple[int, int, int]]:
    """``(start, run, period)``: ``code[i] == code[i + period]`` for every ``i`` in ``[start, start + run)``,
    the longest such region over a few candidate periods; None when nothing repeats ``MIN_PERIODS`` times."""
    n = len(ops)
    if n < 2 * MIN_PERIODS:
        return None
    allocated = {op[3]: i for i, op in enumerate(ops) if op[0] == ALLOC}
    intern: dict = {}
    codes = np.empty(n, dtype=np.int64)
    for i, op in enumerate(ops):
        code: tuple
        if op[0] == ALLOC:
            f = frees.get(op[3])
            code = (ALLOC, op[1], op[2], None if f is None else f - i)
        else:
            a = allocated.get(op[1])
            code = (FREE, i - a) if a is not None else (FREE, None, op[1])  # a free from elsewhere never repeats
        codes[i] = intern.setdefault(code, len(intern))
    last: dict = {}
    gaps: Counter = Counter()
    for i, c in enumerate(codes.tolist()):
        if c in last:
            gaps[i - last[c]] += 1
        last[c] = i
    best: Optional[tuple[int, int, int]] = None
    for period, _ in gaps.most_common(CANDIDATES):
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
        if best is None or run // period > best[1] // best[2] or (run // period == best[1] // best[2] and run > best[1]):
            best = (start, run, period)
    return best


def boundaries(fold: tuple[int, int, int]) -> tuple[list[int], int]:
    """The period starts of a region, and where its last period ends."""
    start, run, period = fold
    count = run // period
    return [start + j * period for j in range(count + 1)], start + (count + 1) * period


def signature(layout: tuple, live: dict, frees: dict, at: int, end: int) -> tuple:
    """The state at event ``at`` up to renaming: the pool's layout, and each live block's address with how
    many events later it is freed; a block freed only after the region's ``end`` (or never in this bucket)
    takes no part in it and is marked by its own key."""
    marks = []
    for key, addr in live.items():
        f = frees.get(key)
        marks.append((addr, f - at) if f is not None and f < end else (addr, -1, key))
    marks.sort()
    return layout, tuple(marks)


def rename(ops: list, live: dict, frees: dict, shift: int, end: int) -> Optional[dict]:
    """The live map ``shift`` events later in an equivalent state (blocks freed after ``end`` keep their
    keys); None if an op there is not the free it must be (the jump is then not taken)."""
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
