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
from typing import TYPE_CHECKING, Optional, TypeAlias

from bcgprof.analysis.predict.allocator import ALLOC, FREE

if TYPE_CHECKING:  # numpy is imported where events are compared (a layer prediction never does)
    import numpy as np


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


# a bucket's events as interpolation compares them, as arrays: each event's kind and, its size left
# out, its value (an allocation's stream; a free's number in the bucket of the allocation it frees,
# -1 for one of another bucket), then the allocations' sizes and their segment hints
Shape: TypeAlias = "tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]"


def shape_of(ops: Sequence[tuple]) -> Shape:
    """The :data:`Shape` of replayable ops (``(ALLOC, requested, stream, key, segment hint,
    address)`` or ``(FREE, key)``)."""
    import numpy as np

    number: dict[int, int] = {}
    kinds: list[int] = []
    values: list[int] = []
    sizes: list[int] = []
    hints: list[int] = []
    for op in ops:
        kinds.append(op[0])
        if op[0] == ALLOC:
            number[op[3]] = len(sizes)
            values.append(op[2])
            sizes.append(op[1])
            hints.append(op[4])
        else:
            values.append(number.get(op[1], -1))
    arrays = [np.asarray(v, dtype=np.int64) for v in (kinds, values, sizes, hints)]
    return arrays[0], arrays[1], arrays[2], arrays[3]


@dataclass(frozen=True)
class Pattern:
    """What two profiled buckets' events share: the events with sizes left out (``events``), each
    bucket's allocation sizes, and each one's segment hints (they only break ties)."""

    lower: int
    upper: int
    kinds: np.ndarray  # each event's, and its value (see Shape): the events, sizes left out
    values: np.ndarray
    low_sizes: np.ndarray
    high_sizes: np.ndarray
    low_hints: np.ndarray
    high_hints: np.ndarray

    @property
    def events(self) -> int:
        return len(self.kinds)


def pair_pattern(
    lower: int, lower_shape: Shape, upper: int, upper_shape: Shape
) -> tuple[Optional[Pattern], str]:
    """The :class:`Pattern` of two profiled buckets' events (each one's :data:`Shape`), or (None,
    why no bucket between them can be drawn from them)."""
    import numpy as np

    low_kinds, low_values, low_sizes, low_hints = lower_shape
    high_kinds, high_values, high_sizes, high_hints = upper_shape
    (short_k, short_v), (long_k, long_v) = sorted(
        ((low_kinds, low_values), (high_kinds, high_values)), key=lambda kv: len(kv[0])
    )
    n = len(short_k)
    if (
        np.array_equal(long_k[:n], short_k)
        and np.array_equal(long_v[:n], short_v)
        and bool((long_k[n:] == FREE).all())
    ):
        # the last bucket captured has no later warm-up to record the frees after its capture: the
        # other's tell
        low_kinds, low_values = high_kinds, high_values = long_k, long_v
    if not (np.array_equal(low_kinds, high_kinds) and np.array_equal(low_values, high_values)):
        return None, (
            f"the captures of {lower} and {upper} differ in more than their sizes (the kernels "
            "allocate "
            "differently between them)"
        )
    if bool(((low_kinds == FREE) & (low_values < 0)).any()):
        return None, f"the capture of {lower} or {upper} frees blocks of another bucket"
    return (
        Pattern(lower, upper, low_kinds, low_values, low_sizes, high_sizes, low_hints, high_hints),
        "",
    )


def line_sizes(bucket: int, p: Pattern) -> np.ndarray:
    """Each allocation's size at ``bucket`` (``p.lower`` < bucket < ``p.upper``), as
    :func:`line_size` gives it: whole arrays at once where no product can pass 63 bits, else one by
    one in Python's integers (the same numbers)."""
    import numpy as np

    span = p.upper - p.lower
    low, high = p.low_sizes, p.high_sizes
    if not len(low):
        return np.zeros(0, dtype=np.int64)
    largest = max(
        abs(int(low.min())), abs(int(low.max())), abs(int(high.min())), abs(int(high.max()))
    )
    if largest * span < 1 << 62:  # each product below 2**62, their sum below 2**63
        return -(-(low * (p.upper - bucket) + high * (bucket - p.lower)) // span)
    return np.array(
        [
            line_size(bucket, p.lower, a, p.upper, b)
            for a, b in zip(low.tolist(), high.tolist(), strict=True)
        ],
        dtype=np.int64,
    )
