"""Request lengths and the padding a bucket list makes of them.

A prefill batch of ``t`` tokens runs in the smallest captured bucket ``b >= t`` and computes
``b - t`` tokens for nothing; a batch longer than the largest bucket is cut into chunks of the
largest bucket, and only its remainder pads. **Expected padding** is padded tokens over
requested tokens (full chunks included): lengths 3, 5 and 10 on the list 4,8 pad 1 + 3 + 2 = 6
tokens (10 runs as a chunk of 8 and a remainder of 2 in bucket 4) of 18 requested: 33.3%.
:func:`padding_pct` is the one definition; the token counts come from ``advise --lengths``
(:func:`read_lengths`) or are uniform over the profiled range (:func:`length_weights`).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import numpy as np

from bcgprof.errors import AdviceError
from bcgprof.inputs import open_regular_text
from bcgprof.text import printable

# A lengths file is a sample of observed prefill sizes, one count (at most 10 digits) a row: a
# million
# rows is far more than a padding estimate needs, and 16 MiB holds them with room for a few more
# columns.
# Within both caps reading takes well under a second and some 100 MiB.
MAX_LENGTHS_FILE_BYTES = 16 * 2**20
MAX_LENGTHS = 1_000_000
MAX_REQUEST_TOKENS = 2**31 - 1  # longer than any context window


# ASCII digits: str.isdigit() also takes "²", which int() refuses
_COUNT = re.compile(r"[+-]?[0-9]+")


def _looks_numeric(cell: str) -> bool:
    """A number of any spelling (5.5, 1e3, nan, a count too long): a bad value, not a header."""
    if _COUNT.fullmatch(cell):
        return True
    try:
        float(cell)
    except ValueError:
        return False
    return True


def read_lengths(path: Path) -> list[int]:
    """Token counts, one per row, from a CSV file (a header row is allowed; the first column is
    read).

    Only a regular file of at most :data:`MAX_LENGTHS_FILE_BYTES` is read (its size checked before a
    byte is), of at most :data:`MAX_LENGTHS` counts (a line each, and a header). A file of plain
    counts is checked in one pass over its first column; any other is read row by row, which names
    the first bad row.
    """
    what = "--lengths"
    with open_regular_text(Path(path), what, MAX_LENGTHS_FILE_BYTES) as f:
        try:
            text = f.read(MAX_LENGTHS_FILE_BYTES + 1)
        except UnicodeDecodeError as e:
            raise AdviceError(
                f"cannot read {what} {path}: {printable(e, 120)}; give a UTF-8 CSV file of token "
                "counts"
            ) from None
    if len(text) > MAX_LENGTHS_FILE_BYTES:  # it grew while being read
        raise AdviceError(
            f"{what} {path} is over the cap of {MAX_LENGTHS_FILE_BYTES // 2**20} MiB; pass a sample"
        )
    # lines beyond a header and the counts
    if text.count("\n", 0, len(text) - 1) >= MAX_LENGTHS + 1:
        raise AdviceError(
            f"{what} {path} has more than {MAX_LENGTHS + 1} lines; it may hold at most "
            f"{MAX_LENGTHS} "
            "token counts, one a line: pass a sample"
        )
    values = _plain_counts(text)
    values = _checked_counts(text, path, what) if values is None else values
    if not values:
        raise AdviceError(f"{what} {path} holds no token counts")
    return values


def _plain_counts(text: str) -> Optional[list[int]]:
    """The counts of a file that is a column of unsigned counts (a header, other columns and blank
    rows allowed), each in range; None for anything else (quotes, a sign, a bad cell), for
    :func:`_checked_counts` to read and name."""
    if '"' in text:
        return None
    cells = [line.split(",", 1)[0].strip() for line in text.split("\n")]
    if cells and not _looks_numeric(cells[0]):
        cells[0] = ""  # a header
    cells = [c for c in cells if c]
    joined = "".join(cells)
    # ASCII digits only
    if not (joined.isascii() and joined.isdigit() and max(map(len, cells)) <= 10):
        return None
    values = list(map(int, cells))
    return values if min(values) >= 1 and max(values) <= MAX_REQUEST_TOKENS else None


def _checked_counts(text: str, path: Path, what: str) -> list[int]:
    """The counts row by row through the csv module: the first bad row is named."""
    values: list[int] = []
    try:
        for lineno, row in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
            if not row or not row[0].strip():
                continue
            cell = row[0].strip()
            if len(cell) > 40 or not _COUNT.fullmatch(cell):
                if lineno == 1 and not _looks_numeric(cell):
                    continue  # a header
                raise AdviceError(
                    f"{what} {path}:{lineno}: {printable(cell, 40)!r} is not a token count; one "
                    "integer per row"
                )
            value = int(cell)
            if not 1 <= value <= MAX_REQUEST_TOKENS:
                raise AdviceError(
                    f"{what} {path}:{lineno}: a token count is from 1 to {MAX_REQUEST_TOKENS}, "
                    f"got {value}"
                )
            values.append(value)
    except csv.Error as e:
        raise AdviceError(
            f"cannot read {what} {path}: {printable(e, 120)}; give a UTF-8 CSV file of token counts"
        ) from None
    return values


def length_weights(
    candidates: list[int], lengths: Optional[Sequence[int]]
) -> tuple[np.ndarray, float, str]:
    """Per-token-count weights over 1..max (the remainders after chunking at the largest bucket),
    the requested tokens they stand for (full chunks included), and a description of the source."""
    top = candidates[-1]
    weights = np.zeros(top + 1)
    if lengths is None:
        weights[1:] = 1.0
        return weights, float(top * (top + 1) // 2), f"uniform over 1..{top} tokens"
    # the remainders
    counts = np.bincount(np.asarray(lengths, dtype=np.int64) % top, minlength=top + 1)
    weights[1:] = counts[1 : top + 1]  # a remainder of 0 is full chunks alone: it pads nothing
    requested = float(sum(lengths))
    return weights, requested, f"{len(lengths)} observed lengths ({requested:.0f} tokens)"


def padding_pct(buckets: Sequence[int], weights: np.ndarray, requested_tokens: float) -> float:
    """Expected padding in percent: padded tokens over requested tokens (the module docstring's
    definition)."""
    return 100.0 * padding_of(buckets, weights) / requested_tokens if requested_tokens else 0.0


def padding_of(buckets: Sequence[int], weights: np.ndarray) -> float:
    """Weighted padded tokens of a bucket list (every count runs in the smallest bucket that holds
    it)."""
    total, lo = 0.0, 0
    for b in sorted(buckets):
        counts = np.arange(lo + 1, b + 1)
        total += float(np.sum((b - counts) * weights[lo + 1 : b + 1]))
        lo = b
    return total


class Padding:
    """Weighted padded tokens from cumulative sums: ``pad(lo, b)``, of the counts in ``(lo, b]`` run
    in bucket
    ``b``, is ``b * (W(b) - W(lo)) - (T(b) - T(lo))`` (``W``: the weight of the counts up to a
    value, ``T``:
    their weighted tokens); :func:`padding_of` summed over a list's gaps, in O(1) a gap."""

    def __init__(self, weights: np.ndarray):
        self.cw = np.cumsum(weights)  # weight of counts <= x
        # weighted tokens of counts <= x
        self.ct = np.cumsum(weights * np.arange(len(weights), dtype=float))

    def pad(self, lo: int, b: int) -> float:
        return float(b * (self.cw[b] - self.cw[lo]) - (self.ct[b] - self.ct[lo]))

    def of(self, buckets: Sequence[int]) -> float:
        total, lo = 0.0, 0
        for b in buckets:  # ascending, as padding_of adds them
            total += self.pad(lo, b)
            lo = b
        return total


def padding_table(candidates: list[int], weights: np.ndarray) -> np.ndarray:
    """pad[i, j]: padded tokens (weighted) of the counts in (candidates[i], candidates[j]] run in
    bucket j; i = -1 (row 0 here) for counts from 1."""
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
