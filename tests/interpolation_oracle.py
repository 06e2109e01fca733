"""The one-by-one drawing of a bucket not profiled, kept as the tests' reference for the whole-array
drawing the package does (:class:`bcgprof.analysis.predict.bucket_ops.Drawn`): the same rule,
event by event in Python's integers."""

from __future__ import annotations

from collections.abc import Sequence

from bcgprof.analysis.predict.allocator import ALLOC, FREE
from bcgprof.analysis.predict.interpolate import Pattern, line_size, pair_pattern, shape_of


def interpolated_ops(bucket: int, p: Pattern, base: int) -> list[tuple]:
    """``bucket``'s events (``p.lower`` < bucket < ``p.upper``): each size on the line between its
    neighbours', keys ``base | number``, segment hints from the nearer neighbour."""
    hints = (p.low_hints if bucket - p.lower <= p.upper - bucket else p.high_hints).tolist()
    low_sizes, high_sizes = p.low_sizes.tolist(), p.high_sizes.tolist()
    ops: list[tuple] = []
    number = 0
    for kind, value in zip(p.kinds.tolist(), p.values.tolist()):
        if kind == ALLOC:
            size = line_size(bucket, p.lower, low_sizes[number], p.upper, high_sizes[number])
            number += 1
            ops.append((ALLOC, size, value, base | number, hints[number - 1], -1))
        else:
            ops.append((FREE, base | (value + 1)))
    return ops


def interpolate_ops(
    bucket: int,
    lower: int,
    lower_ops: Sequence[tuple],
    upper: int,
    upper_ops: Sequence[tuple],
    base: int,
) -> tuple[list[tuple], str]:
    """``bucket``'s events, from its profiled neighbours ``lower`` < bucket < ``upper`` (each one's
    replayable ops:
    ``(ALLOC, requested, stream, key, segment hint, address)`` or ``(FREE, key)``). Keys are ``base
    | number``; segment hints come from the nearer neighbour (they only break ties). Returns (ops,
    "") or ([], why not)."""
    found, why = pair_pattern(lower, shape_of(lower_ops), upper, shape_of(upper_ops))
    return (interpolated_ops(bucket, found, base), "") if found is not None else ([], why)
