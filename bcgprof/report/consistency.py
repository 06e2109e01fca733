"""The rows of a report checked against its run.json, and summary.csv against buckets.csv.

What a capture writes, and so what every report must say (:func:`check_bucket_rows`):

* each rank's rows follow run.json's mode order (a mode runs after the one before it), and
  only modes and ranks (``0 .. tp - 1``) run.json lists have rows;
* a mode captures the buckets of run.json in its capture order (:func:`capture_sequence`:
  largest first, or smallest first as run.json's ``order`` says; the floor mode the largest
  bucket alone), each at most once per rank, and stops at its first failure, so the ``order``
  column of a bucket is its place in that sequence, and a mode's rows are the sequence's first
  buckets, none skipped;
* a complete run has every bucket of that sequence, for every mode and rank;
* a replay check that failed is an ``error`` row: an ``ok`` row's ``replay_max_abs_diff`` is
  empty (not checked) or within :data:`REPLAY_ATOL`; a larger difference, or ``inf`` (the replay
  gave NaN), only on a row that is not ``ok`` (``error``, or ``oom`` when the out-of-memory came
  after the check).

summary.csv (:func:`check_summary_rows`): its modes and ranks are the run's, each once; in a
complete report every row equals what :func:`~bcgprof.report.summaries.summarize` gives for
the bucket rows. sites.csv (:func:`check_site_rows`): modes, ranks and buckets of the run.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Container, Sequence
from dataclasses import fields
from itertools import compress, repeat
from operator import attrgetter, eq
from pathlib import Path
from typing import Optional

from bcgprof.errors import ReportError
from bcgprof.report.codec import FIX, encode_value, shorten
from bcgprof.report.schema import BucketRecord, RunInfo, SiteRecord, SummaryRecord
from bcgprof.vocab import BucketStatus, Mode, Order, RunStatus, Source

# The replay tolerance of every capture: bcgprof.measure.capture.Capturer.verify marks a bucket
# ``error`` when its replay differs from the eager forward by more than its ``atol``, which the mode
# loop (bcgprof.measure.mode) leaves at 0.0: a replay must equal the eager forward bit for bit.
# run.json does not record it because no capture option changes it.
REPLAY_ATOL = 0.0


def capture_sequence(run: RunInfo, mode: str) -> list[int]:
    """The buckets ``mode`` captures, in order (bcgprof.measure.capture.Capturer's rule; a
    recording's order is its program's, kept in run.json's ``extra.sequences``)."""
    if run.source == Source.RECORD:
        return list(run.extra["sequences"][mode])
    largest_first = sorted(set(run.buckets), reverse=True)
    if mode == Mode.FLOOR:
        return largest_first[:1]
    return largest_first if run.order != Order.SMALLEST_FIRST else largest_first[::-1]


def _rank_text(run: RunInfo, rank: int) -> str:
    return f" rank {rank}" if run.tp > 1 else ""


def _check_replay(where: str, r: BucketRecord) -> None:
    diff = r.replay_max_abs_diff
    if diff is None or diff <= REPLAY_ATOL:
        return
    if r.status == BucketStatus.OK:
        shown = "inf (the replay gave NaN)" if math.isinf(diff) else encode_value(diff)
        raise ReportError(
            f"{where}, column replay_max_abs_diff: {shown}, above the replay tolerance of "
            f"{REPLAY_ATOL:g}, on a bucket whose status is ok; a capture marks such a bucket "
            "error: "
            f"{FIX}"
        )


def check_bucket_rows(path: Path, run: RunInfo, rows: list[BucketRecord], lines: list[int]) -> None:
    """buckets.csv (at ``path``) agrees with ``run``: see the module docstring."""
    place = {m: i for i, m in enumerate(run.modes)}
    sequences = {m: capture_sequence(run, m) for m in run.modes}
    positions = {m: {b: i for i, b in enumerate(seq)} for m, seq in sequences.items()}
    if _rows_agree(run, rows, place, positions, sequences, path):
        return
    listed = set(run.buckets)
    latest: dict[int, int] = {}  # rank -> the place in run.modes of its last mode seen
    seen: dict[tuple, int] = {}
    tp = run.tp
    # 100,000 rows: messages are made only when raised
    for r, line in zip(rows, lines, strict=True):
        mode, rank, bucket = r.mode, r.rank, r.bucket
        mode_place = place.get(mode)
        if mode_place is None:
            raise ReportError(
                f"{path}: row {line}, column mode: mode {mode}, which run.json's modes "
                f"({', '.join(run.modes) or 'none'}) do not list; {FIX}"
            )
        if rank >= tp:
            raise ReportError(
                f"{path}: row {line}, column rank: rank {rank}, but run.json says tp {tp}; {FIX}"
            )
        before = latest.get(rank, -1)
        if mode_place != before:
            if mode_place < before:
                raise ReportError(
                    f"{path}: row {line}, column mode: a {mode} row after the {run.modes[before]} "
                    f"rows{_rank_text(run, rank)}, but run.json runs the modes in the order "
                    f"{', '.join(run.modes)}; {FIX}"
                )
            latest[rank] = mode_place
        position = positions[mode].get(bucket)
        if position is None:
            if bucket in listed:
                raise ReportError(
                    f"{path}: row {line}, column bucket: the floor mode captures the largest "
                    "bucket "
                    f"alone ({sequences[mode][0]}), not bucket {bucket}; {FIX}"
                )
            raise ReportError(
                f"{path}: row {line}, column bucket: bucket {bucket} is not in run.json's bucket "
                f"list ({len(run.buckets)} buckets); {FIX}"
            )
        key = (mode, rank, bucket)
        if key in seen:
            raise ReportError(
                f"{path}: row {line} repeats mode {mode} rank {rank} bucket {bucket} "
                f"(first at row {seen[key]}); each bucket is captured once per mode: {FIX}"
            )
        seen[key] = line
        if r.order != position:
            raise ReportError(
                f"{path}: row {line}, column order: order {r.order} for {mode} bucket {bucket}, "
                "but "
                f"run.json's buckets captured {run.order} put it at {position}; {FIX}"
            )
        diff = r.replay_max_abs_diff
        if diff is not None and diff > REPLAY_ATOL:
            _check_replay(f"{path}: row {line}", r)
    counts = Counter((mode, rank) for mode, rank, _ in seen)
    _check_no_gaps(path, run, sequences, seen, counts)


def check_bucket_sums(path: Path, rows: list[BucketRecord], lines: list[int]) -> None:
    """The figures a capture derives from the same readings agree within each row, so a row edited
    by hand is not read as a capture: non-torch is device used less torch reserved, memory outside
    the pool is torch reserved less the pool's growth, and the ledger's four causes sum to device
    used."""
    for r, line in zip(rows, lines, strict=True):
        if r.status != BucketStatus.OK:
            continue
        wrong = ""
        if r.non_torch_delta_bytes != r.device_used_delta_bytes - r.torch_reserved_delta_bytes:
            wrong = (
                "non_torch_delta_bytes is not device_used_delta_bytes less "
                "torch_reserved_delta_bytes"
            )
        elif (
            r.outside_pool_delta_bytes is not None
            and r.outside_pool_delta_bytes != r.torch_reserved_delta_bytes - r.pool_delta_bytes
        ):
            wrong = (
                "outside_pool_delta_bytes is not torch_reserved_delta_bytes less pool_delta_bytes"
            )
        elif (
            r.pool_live_delta_bytes is not None
            and r.pool_free_delta_bytes is not None
            and r.outside_pool_delta_bytes is not None
            and r.pool_live_delta_bytes
            + r.pool_free_delta_bytes
            + r.outside_pool_delta_bytes
            + r.non_torch_delta_bytes
            != r.device_used_delta_bytes
        ):
            wrong = (
                "the ledger's pool_live, pool_free, outside_pool and non_torch do not sum to "
                "device_used_delta_bytes"
            )
        if wrong:
            raise ReportError(
                f"{path}: row {line} ({r.mode} bucket {r.bucket}): {wrong}, as a capture writes "
                "them; "
                f"{FIX}"
            )


def _rows_agree(
    run: RunInfo,
    rows: list[BucketRecord],
    place: dict[str, int],
    positions: dict[str, dict[int, int]],
    sequences: dict[str, list[int]],
    path: Path,
) -> bool:
    """Whether :func:`check_bucket_rows`'s row-by-row checks would all pass, found a column at a
    time at C speed (100,000 rows); the gaps are then checked as there. False at the first doubt:
    the rows are then checked one by one, and the first bad one named."""
    modes = list(map(attrgetter("mode"), rows))
    ranks = list(map(attrgetter("rank"), rows))
    buckets = list(map(attrgetter("bucket"), rows))
    if not place.keys() >= set(modes) or (ranks and max(ranks) >= run.tp):
        return False
    keys = list(zip(modes, ranks, buckets))
    seen = set(keys)
    if len(seen) != len(keys):  # a row repeated
        return False
    orders = list(map(attrgetter("order"), rows))
    for mode in set(modes):  # each row's order is its bucket's place in the mode's capture sequence
        rows_of_mode = list(map(eq, repeat(mode), modes))
        wanted = list(map(positions[mode].get, compress(buckets, rows_of_mode)))
        if None in wanted or wanted != list(compress(orders, rows_of_mode)):
            return False
    places = list(map(place.__getitem__, modes))
    for rank in set(ranks):  # each rank's rows follow run.json's mode order
        seq = list(compress(places, map(eq, repeat(rank), ranks)))
        if seq != sorted(seq):
            return False
    diffs = list(map(attrgetter("replay_max_abs_diff"), rows))
    if any(
        rows[i].status == BucketStatus.OK
        for i, d in enumerate(diffs)
        if d is not None and d > REPLAY_ATOL
    ):
        return False
    _check_no_gaps(path, run, sequences, seen, Counter(zip(modes, ranks)))
    return True


def _check_no_gaps(
    path: Path,
    run: RunInfo,
    sequences: dict[str, list[int]],
    seen: Container[tuple],
    counts: Counter,
) -> None:
    """A mode's rows are the first buckets of its sequence; a complete run has all of them."""
    complete = run.status == RunStatus.COMPLETE
    for mode in run.modes:
        sequence = sequences[mode]
        for rank in range(run.tp):
            n = counts.get((mode, rank), 0)
            # a recording's process captures the groups it captures: a rank without any row of a
            # group is whole
            wanted = len(sequence) if complete and (n or run.source != Source.RECORD) else n
            absent = [b for b in sequence[:wanted] if (mode, rank, b) not in seen]
            if not absent:
                continue
            bucket = absent[0]
            more = f" and {len(absent) - 1} more" if len(absent) > 1 else ""
            if complete:
                raise ReportError(
                    f"{path}: run.json says it is complete but has no row for {mode} bucket "
                    f"{bucket}"
                    f"{_rank_text(run, rank)}{more}; a complete report holds every bucket of every "
                    f"mode: {FIX}"
                )
            raise ReportError(
                f"{path}: {mode}{_rank_text(run, rank)} has no row for bucket {bucket}{more}, "
                "which its "
                f"capture order puts before buckets it has rows for; {FIX}"
            )


def _summary_rank(path: Path, run: RunInfo, line: int, rank: str) -> str:
    """A summary row's rank, normalised (``007`` is ``7``); ``max`` and ``sum`` across ranks."""
    if rank in ("max", "sum"):
        return rank
    if not (rank.isascii() and rank.isdigit() and len(rank) <= 6 and int(rank) < run.tp):
        raise ReportError(
            f"{path}: row {line}, column rank: {shorten(rank)} is not a rank of this run "
            f"(0 to {run.tp - 1}, max or sum); {FIX}"
        )
    return str(int(rank))


def check_summary_rows(
    path: Path,
    run: RunInfo,
    rows: list[SummaryRecord],
    lines: list[int],
    header: list[str],
    computed: list[SummaryRecord],
) -> None:
    """summary.csv is well formed; in a complete report it must say what buckets.csv gives."""
    seen: dict[tuple, int] = {}
    for s, line in zip(rows, lines, strict=True):
        s.rank = _summary_rank(path, run, line, s.rank)
        if s.mode not in run.modes:
            raise ReportError(
                f"{path}: row {line}, column mode: mode {s.mode}, which run.json's modes "
                f"({', '.join(run.modes) or 'none'}) do not list; {FIX}"
            )
        key = (s.mode, s.rank)
        if key in seen:
            raise ReportError(
                f"{path}: row {line} repeats mode {s.mode} rank {s.rank} (first at row "
                f"{seen[key]}); "
                f"{FIX}"
            )
        seen[key] = line
    if run.status != RunStatus.COMPLETE:
        return
    fix = (
        "summary.csv and buckets.csv of a complete report must agree: restore both from the "
        "capture, "
        "or re-run it"
    )
    mine = {(s.mode, s.rank) for s in rows}
    for s in computed:
        if (s.mode, s.rank) not in mine:
            raise ReportError(
                f"{path} has no row for mode {s.mode} rank {s.rank}, which buckets.csv has; {fix}"
            )
    wanted = {(s.mode, s.rank): s for s in computed}
    names = [f.name for f in fields(SummaryRecord) if f.name in header]
    for s, line in zip(rows, lines, strict=True):
        other: Optional[SummaryRecord] = wanted.get((s.mode, s.rank))
        if other is None:
            raise ReportError(
                f"{path}: row {line} (mode {s.mode} rank {s.rank}) has no rows in buckets.csv; "
                f"{fix}"
            )
        for name in names:
            a, b = getattr(s, name), getattr(other, name)
            same = a == b or (
                isinstance(a, float)
                and isinstance(b, float)
                and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
            )
            if not same:
                raise ReportError(
                    f"{path}: row {line}, column {name}: {encode_value(a) or 'empty'}, but "
                    "buckets.csv "
                    f"gives {encode_value(b) or 'empty'}; {fix}"
                )


def check_site_rows(
    path: Path,
    run: RunInfo,
    rows: list[SiteRecord],
    lines: list[int],
    buckets: Sequence[BucketRecord] = (),
) -> None:
    """sites.csv names modes, ranks and buckets of the run, and the rows of each (mode, rank,
    bucket) sum to that bucket's pool in buckets.csv (the peak's sites and the slack are the whole
    pool)."""
    listed = set(run.buckets)
    sums: dict[tuple[str, int, int], int] = {}
    for s in rows:
        key = (s.mode, s.rank, s.bucket)
        sums[key] = sums.get(key, 0) + s.bytes
    pools = {
        (r.mode, r.rank, r.bucket): r.pool_bytes for r in buckets if r.status == BucketStatus.OK
    }
    for (mode, rank, bucket), total in sums.items():
        pool = pools.get((mode, rank, bucket))
        if pool is not None and pool != total:
            raise ReportError(
                f"{path}: the rows of {mode} rank {rank} bucket {bucket} sum to {total} bytes, "
                "but its "
                f"pool in buckets.csv is {pool}; {FIX}"
            )
    for s, line in zip(rows, lines, strict=True):
        where = f"{path}: row {line}"
        if s.mode not in run.modes:
            raise ReportError(
                f"{where}, column mode: mode {s.mode}, which run.json's modes "
                f"({', '.join(run.modes) or 'none'}) do not list; {FIX}"
            )
        if s.rank >= run.tp:
            raise ReportError(
                f"{where}, column rank: rank {s.rank}, but run.json says tp {run.tp}; {FIX}"
            )
        if s.bucket not in listed:
            raise ReportError(
                f"{where}, column bucket: bucket {s.bucket} is not in run.json's bucket list; {FIX}"
            )
