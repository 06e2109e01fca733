"""The shape of the lines a recorded process writes (:mod:`bcgprof.record.rows`), as
:func:`bcgprof.record.merge.merge` accepts them.

The hook writes only lines of this shape, but the spool lies in the report, where the recorded
program (or anything) can write: a line of another shape (an unknown group or status, a reading or
count that is not an int within a report's byte limit, a time that is not a finite number of ms, a
pid a report's column cannot hold) must cost its own row, never the report, and a row whose figures
(differences and sums of readings) a report column cannot hold (:data:`BUCKET_RULES`) is dropped
the same way. Cost: a few dict lookups a line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Optional

from bcgprof.buckets import MAX_BUCKET_SIZE
from bcgprof.record.rows import BUCKET, PROCESS, TRACE
from bcgprof.report.limits import MAX_BYTES, MAX_MS
from bcgprof.report.schema import BUCKET_RULES
from bcgprof.vocab import BucketStatus, RecordGroup

_PID_MAX = 2**31 - 1  # as a report's pid column
# groups the hook writes (UNBUCKETED is the merge's own)
_GROUPS = frozenset(g.value for g in RecordGroup) - {RecordGroup.UNBUCKETED.value}
_STATUSES = frozenset(s.value for s in BucketStatus)


def well_formed(lines: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int, str]:
    """The lines of the shape the hook writes, how many others there were, and the first one's
    reason."""
    kept, skipped, first = [], 0, ""
    for line in lines:
        problem = line_problem(line)
        if problem is None:
            kept.append(line)
        else:
            skipped += 1
            first = first or problem
    return kept, skipped, first


def line_problem(line: dict[str, Any]) -> Optional[str]:
    kind = line["kind"]
    if not 0 <= line["pid"] <= _PID_MAX:
        return f"pid {line['pid']} out of range"
    if kind == BUCKET:
        if not _word(line.get("group"), _GROUPS):
            return f"bucket line of unknown group {str(line.get('group'))[:40]!r}"
        size = line.get("size")
        if size is not None and not (_count(size) and size <= MAX_BUCKET_SIZE):
            return f"bucket size {str(size)[:40]} is not an int from 1 to {MAX_BUCKET_SIZE}"
        if not _word(line.get("status", BucketStatus.OK.value), _STATUSES):
            return f"bucket status {str(line.get('status'))[:40]!r}"
        for side in ("before", "after"):
            if _reading_problem(line.get(side)):
                return f"bucket reading {side!r} of the wrong shape"
        for key in ("graphs", "nodes", "device_peak", "rank"):
            if line.get(key) is not None and not _count(line[key]):
                return f"bucket field {key!r} is not a count"
        for key in ("detail", "by"):
            if not isinstance(line.get(key, ""), str):
                return f"bucket field {key!r} is not text"
        for key in ("warmup_ms", "capture_ms", "hook_ms"):
            if line.get(key) is not None and not (_finite(line[key]) and abs(line[key]) <= MAX_MS):
                return f"bucket field {key!r} is not a finite number of ms"
        pools = line.get("graph_pools", [])
        if not (isinstance(pools, list) and all(isinstance(p, str) for p in pools)):
            return "bucket field 'graph_pools' is not a list of pool names"
    elif kind == PROCESS:
        if line.get("rank") is not None and not _count(line["rank"]):
            return "process rank is not a count"
        for key in ("gpu", "driver", "torch", "cuda", "memory_source", "hook_path"):
            if not isinstance(line.get(key, ""), str):
                return f"process field {key!r} is not text"
        engines = line.get("engines", {})
        if not (
            isinstance(engines, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in engines.items())
        ):
            return "process field 'engines' is not a table of versions"
        argv = line.get("argv", [])
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
            return "process field 'argv' is not a list of words"
    elif kind == TRACE:
        if not _word(line.get("group"), _GROUPS):
            return f"trace line of unknown group {str(line.get('group'))[:40]!r}"
        if not isinstance(line.get("note", ""), str):
            return "trace field 'note' is not text"
    return None


def _word(value: Any, words: frozenset[str]) -> bool:
    return isinstance(value, str) and value in words


def figures_problem(figures: dict[str, Any]) -> str:
    """The first figure of a row that its report column cannot hold (``BUCKET_RULES``), or ""."""
    for name, value in figures.items():
        rule = BUCKET_RULES.get(name)
        if rule is None or value is None or rule.kind is str:
            continue
        if (
            not _finite(value)
            or (rule.lo is not None and value < rule.lo)
            or (rule.hi is not None and value > rule.hi)
        ):
            return f"{name} {value} is out of its column's range"
    return ""


def _reading_problem(reading: Any) -> bool:
    if reading is None:
        return False
    if not isinstance(reading, dict):
        return True
    for key in ("allocated", "reserved", "used", "process", "free"):
        if reading.get(key) is not None and not _count(reading[key], low=0):
            return True
    if reading.get("time") is not None and not (_finite(reading["time"]) and reading["time"] >= 0):
        return True
    pools = reading.get("pools", {})
    return not isinstance(pools, dict) or not all(
        isinstance(v, (list, tuple)) and len(v) == 2 and all(_count(x, low=0) for x in v)
        for v in pools.values()
    )


def _count(value: Any, low: int = 0) -> bool:
    """An int from ``low`` to a report's largest byte figure (no reading or count is larger)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_BYTES


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
