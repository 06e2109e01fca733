"""The bounds of a report bcgprof accepts: how many rows, how large its files, how long its text.

Each cap follows from what a capture can write, with room to spare; a file beyond a cap is
refused (the message names the cap) before more of it than the cap is read, and every file is
read as a stream, so a malformed file fails at its first bad line.

=====================
============================================================================== buckets per list
 :data:`MAX_BUCKETS` = 4096 (``bcgprof.buckets``: the most a bucket spec expands to) modes
        :data:`MAX_MODES` = 4 (per-bucket, shared, shared-largest, floor)
tensor-parallel ranks  :data:`MAX_TP` = 8: a capture runs one process per GPU of one host, and hosts
hold
                       at most 8 GPUs on one NVLink switch (HGX/DGX)
bucket rows            4 modes x run.json's ranks x its buckets, at most :data:`MAX_BUCKET_ROWS` =
131,072
                       (a capture writes 3 x buckets + 1 a rank: the floor holds one; 98,312 at the
                       caps)
summary rows           :data:`MAX_SUMMARY_ROWS` = 40: 4 modes x (8 ranks + ``max`` and ``sum``
across ranks) run.json               :data:`MAX_RUN_BYTES` = 1 MiB, nested at most
:data:`MAX_JSON_DEPTH` = 16 deep buckets.csv            :data:`MAX_BUCKETS_BYTES` = 64 MiB: 131,072
rows of 512 bytes on average (a row of
                       figures takes about 170 bytes, the rest is room for failure messages)
summary.csv            :data:`MAX_SUMMARY_BYTES` = 1 MiB
sites.csv              :data:`MAX_SITES_BYTES` = 16 MiB
one CSV line           :data:`MAX_LINE_BYTES` = 8 KiB (a row of figures takes at most ~700 bytes,
and its
                       one text field at most :data:`MAX_TEXT_CHARS` characters)
one text field         :data:`MAX_TEXT_CHARS` = 1000 characters: a longer one (run.json or CSV) is
cut, with
                       an ellipsis, when read and when written, so what is written reads back the
                       same
allocator traces       :mod:`bcgprof.report.traces`: 4 MiB compressed, 64 MiB of text and 1,000,000
rows a file
                       (about 1.5 times the largest a real capture wrote), each checked while
                       inflating
=====================
==============================================================================

Figures: bytes within +-:data:`MAX_BYTES` (1 PiB), times within :data:`MAX_MS` (about 11 days).
"""

from __future__ import annotations

from bcgprof.buckets import MAX_BUCKETS
from bcgprof.options import REPORT_MODES

MAX_MODES = len(REPORT_MODES)  # a capture's four modes, or the groups of a recording
MAX_TP = 8  # tensor-parallel ranks: the GPUs of one host
MAX_BUCKET_ROWS = MAX_MODES * MAX_TP * MAX_BUCKETS
MAX_SUMMARY_ROWS = MAX_MODES * (MAX_TP + 2)

MIB = 1024**2
MAX_RUN_BYTES = 1 * MIB
MAX_BUCKETS_BYTES = 64 * MIB
MAX_SUMMARY_BYTES = 1 * MIB
MAX_SITES_BYTES = 16 * MIB
MAX_FILE_BYTES = MAX_BUCKETS_BYTES  # the largest file of a report
MAX_LINE_BYTES = 8192
MAX_TEXT_CHARS = 1000
MAX_JSON_DEPTH = 16

MAX_BYTES = 2**50  # 1 PiB: no byte figure of one GPU can be larger
MAX_MS = 1e9  # about 11 days, in milliseconds
INT64 = 2**63
