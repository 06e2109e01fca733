"""A bucket the profile did not capture, drawn from the two profiled buckets around it.

A bucket's graph-pool events are the model code's requests, in program order: between two
profiled buckets whose captures made the same requests in the same order (the same streams,
each free releasing the same allocation), a bucket in between makes them too, and only the
sizes change with the token count. Most sizes are a straight line in tokens (activations are
rows x width); a few carry a ceiling (a kernel's blocks of tokens, an alignment), where the
line between the two neighbours can be short or long by one of the allocator's 512-byte steps.
Each size is therefore taken from the line through the neighbours, rounded up; how far that is
from a captured bucket is measured, not assumed: profiled buckets left out and interpolated, and
captured lists predicted from sparser traced lists (``tests/regression/test_interpolate.py``; the
calibration keeps such lists as evidence, :mod:`bcgprof.analysis.predict.calibrate`).

Where the neighbours' events differ in anything but sizes (a kernel that changes its
workspace or its launch shape between them), or a capture frees another bucket's blocks,
the bucket is refused: the events in between are not known. Torch-free.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from bcgprof.analysis.predict.allocator import ALLOC, FREE


def neighbours(profiled: Sequence[int], bucket: int) -> Optional[tuple[int, int]]:
    """The profiled buckets just below and just above ``bucket``; None outside the profiled range.
    ``profiled`` is sorted ascending (a bisection: lists of thousands of buckets are predicted)."""
    below, above = bisect_left(profiled, bucket), bisect_right(profiled, bucket)
    return (profiled[below - 1], profiled[above]) if below > 0 and above < len(profiled) else None


def line_size(bucket: int, lower: int, lower_size: int, upper: int, upper_size: int) -> int:
    """The size at ``bucket`` on the line through (lower, lower_size) and (upper, upper_size),
    rounded up."""
    span = upper - lower
    return -(-(lower_size * (upper - bucket) + upper_size * (bucket - lower)) // span)


def _pattern(ops: Sequence[tuple]) -> tuple[list[tuple], list[int]]:
    """The events with their sizes left out (a free names the allocation it frees by its number in
    the bucket), and the sizes."""
    number: dict[int, int] = {}
    pattern: list[tuple] = []
    sizes: list[int] = []
    for op in ops:
        if op[0] == ALLOC:
            number[op[3]] = len(sizes)
            pattern.append((ALLOC, op[2]))
            sizes.append(op[1])
        else:
            pattern.append((FREE, number.get(op[1], -1)))
    return pattern, sizes


@dataclass(frozen=True)
class Pattern:
    """What two profiled buckets' events share: the events with sizes left out (``events``), each
    bucket's allocation sizes, and each one's segment hints (they only break ties)."""

    lower: int
    upper: int
    pattern: list
    low_sizes: list
    high_sizes: list
    low_hints: list
    high_hints: list

    @property
    def events(self) -> int:
        return len(self.pattern)


def pair_pattern(
    lower: int, lower_ops: Sequence[tuple], upper: int, upper_ops: Sequence[tuple]
) -> tuple[Optional[Pattern], str]:
    """The :class:`Pattern` of two profiled buckets' replayable ops (``(ALLOC, requested, stream,
    key, segment hint, address)`` or ``(FREE, key)``), or (None, why no bucket between them can be
    drawn from them)."""
    low_pattern, low_sizes = _pattern(lower_ops)
    high_pattern, high_sizes = _pattern(upper_ops)
    short, long = sorted((low_pattern, high_pattern), key=len)
    if long[: len(short)] == short and all(op[0] == FREE for op in long[len(short) :]):
        # the last bucket captured has no later warm-up to record the frees after its capture: the
        # other's tell
        low_pattern = high_pattern = long
    if low_pattern != high_pattern:
        return None, (
            f"the captures of {lower} and {upper} differ in more than their sizes (the kernels "
            "allocate "
            "differently between them)"
        )
    if any(op[0] == FREE and op[1] < 0 for op in low_pattern):
        return None, f"the capture of {lower} or {upper} frees blocks of another bucket"
    hints = (
        [op[4] for op in lower_ops if op[0] == ALLOC],
        [op[4] for op in upper_ops if op[0] == ALLOC],
    )
    return Pattern(lower, upper, low_pattern, low_sizes, high_sizes, *hints), ""


def interpolated_ops(bucket: int, p: Pattern, base: int) -> list[tuple]:
    """``bucket``'s events (``p.lower`` < bucket < ``p.upper``): each size on the line between its
    neighbours', keys ``base | number``, segment hints from the nearer neighbour."""
    hints = p.low_hints if bucket - p.lower <= p.upper - bucket else p.high_hints
    ops: list[tuple] = []
    number = 0
    for op in p.pattern:
        if op[0] == ALLOC:
            size = line_size(bucket, p.lower, p.low_sizes[number], p.upper, p.high_sizes[number])
            number += 1
            ops.append((ALLOC, size, op[1], base | number, hints[number - 1], -1))
        else:
            ops.append((FREE, base | (op[1] + 1)))
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
    found, why = pair_pattern(lower, lower_ops, upper, upper_ops)
    return (interpolated_ops(bucket, found, base), "") if found is not None else ([], why)
