"""The bounds of a valid report: value ranges of its figures.

Every figure read from a report is checked against these before anything uses it.
"""

from __future__ import annotations

MAX_FILE_BYTES = 256 * 1024 ** 2  # larger than any report file; refused before it is read
MAX_BYTES = 2 ** 50  # 1 PiB: no byte figure of one GPU can be larger
MAX_MS = 1e9  # about 11 days, in milliseconds
MAX_TP = 4096  # tensor-parallel ranks
INT64 = 2 ** 63
