"""A recording's lines merged into a report: :func:`merge` (torch-free).

Each ``bucket`` line holds one bucket's readings before and after; a row's figures are their
differences, computed by the capture's own ledger (:func:`bcgprof.report.ledger.ledger`), so the
report's own checks hold as for a capture: non-torch is device used less torch reserved, memory
outside the pool is torch reserved less the pool's growth, and the pool's live and free bytes plus
those two sum to device used. The pool is every graph pool the process's captures
had used by the bucket's end, read before and after over that same set. Calls of one bucket function
with one size in one process (a runner that captures a size in several calls) make one row. A line
without a size (a graph outside every bucket function, a call whose size could not be read) is
numbered in capture order; in a group that also has sized lines it is a row of ``unbucketed``, so
that a number never merges with a bucket's size.

Ranks come from torch.distributed, or the launcher's RANK; a process without either takes the next
rank no other process of the report has. A group's capture order (``extra.sequences``) is the
order of its buckets' first appearance, lowest rank first. With ``--trace``, each ``trace`` line
says whether a group's allocator trace was written and by which process, or why it has none (a
process's latest line of a group counts, and a process that wrote the trace beats the others).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from bcgprof.record.adapters import USER_LABEL
from bcgprof.record.rows import BUCKET, PHASE, PROCESS, TRACE
from bcgprof.record.shape import figures_problem, well_formed
from bcgprof.report.ledger import Reading, ledger
from bcgprof.report.limits import MAX_TP
from bcgprof.report.schema import BucketRecord
from bcgprof.vocab import BucketStatus, RecordGroup

MAX_RECORDED_BUCKETS = 4096


class MergeError(ValueError):
    """The lines cannot make a report (too many ranks or buckets)."""


@dataclass
class Span:
    """One process's device-used readings across its buckets: before its first, after its last,
    and the growth its buckets' rows hold. What the device gained between them (``between``) is in
    no row: the program's own work outside its captures (compilation, eager calls, buffers it
    allocates between buckets) or, device-wide readings being what they are, another process's."""

    pid: int
    first: int
    last: int = 0
    in_rows: int = 0
    buckets: int = 0
    rank: Optional[int] = None
    # buckets that began before the one written before them had ended: captures on several
    # threads of the process, each one's readings (device-wide, over its pools) holding the other's
    overlapping: int = 0
    last_end: Optional[float] = None

    @property
    def total(self) -> int:
        """Device used after the last bucket minus before the first."""
        return self.last - self.first

    @property
    def between(self) -> int:
        return self.total - self.in_rows

    def as_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "pid": self.pid,
            "buckets": self.buckets,
            "span_bytes": self.total,
            "in_rows_bytes": self.in_rows,
            "between_bytes": self.between,
            "overlapping_buckets": self.overlapping,
        }


@dataclass
class Merged:
    """What the lines say so far."""

    rows: list[BucketRecord] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)  # in order of first appearance
    sequences: dict[str, list[int]] = field(default_factory=dict)
    # one per process that read memory
    processes: list[dict[str, Any]] = field(default_factory=list)
    phases_open: int = 0  # capture phases begun and not ended, over all processes
    phases_ended: int = 0
    tp: int = 1
    complete: bool = True  # every rank has every bucket of every group it captured
    notes: list[str] = field(default_factory=list)
    bucket_calls: int = 0  # bucket lines of a bucket function's call or a descriptor, sized
    # ... whose size argument gave no positive int (numbered rows), by bucket function
    unsized_calls: dict[str, int] = field(default_factory=dict)
    # lines of a shape the hook does not write, skipped; the first one's reason
    malformed: int = 0
    malformed_first: str = ""
    # group -> its lines without a size made rows of UNBUCKETED (the group has sized rows)
    unbucketed: dict[str, int] = field(default_factory=dict)
    graphs_alone: int = 0  # bucket lines of a graph captured outside every bucket (a row each)
    # what the hook's work in each bucket (readings, node counts, --trace) cost its program
    hook_ms: list[float] = field(default_factory=list)
    # group -> its allocator trace: {"pid", "written", "note"} (--trace)
    traces: dict[str, dict[str, Any]] = field(default_factory=dict)
    # pid -> its device-used readings across its buckets
    spans: dict[int, Span] = field(default_factory=dict)

    def hook_cost(self) -> dict[str, Any]:
        """The hook's time in the program, over its buckets: its readings, its work when each
        graph's capture begins and ends (node counts, ``--trace``), and first-use imports and
        NVML's start in the first bucket of a process."""
        ms = sorted(self.hook_ms)
        return {
            "buckets": len(ms),
            "total_ms": round(sum(ms), 3),
            "median_ms": round(ms[len(ms) // 2], 3) if ms else None,
            "max_ms": round(ms[-1], 3) if ms else None,
        }

    def spans_by_rank(self) -> list[Span]:
        """The processes' spans, lowest rank first."""
        return sorted(self.spans.values(), key=lambda span: (span.rank or 0, span.pid))

    @property
    def buckets(self) -> list[int]:
        return sorted({b for seq in self.sequences.values() for b in seq})


def _pool_total(reading: Optional[dict[str, Any]], pools: Iterable[str], index: int) -> int:
    if not reading:
        return 0
    own = reading.get("pools", {})
    return sum(int(own[p][index]) for p in pools if p in own)


def _reading(reading: dict[str, Any], pools: Iterable[str]) -> Reading:
    """One side of a bucket line as the ledger's reading (absent figures count as zero)."""
    pool, live = _pool_total(reading, pools, 0), _pool_total(reading, pools, 1)
    process = reading.get("process")
    return Reading(
        pool=pool,
        pool_live=live,
        pool_free=pool - live,
        allocated=int(reading.get("allocated") or 0),
        reserved=int(reading.get("reserved") or 0),
        device_used=int(reading.get("used") or 0),
        process_used=None if process is None else int(process),
        free=reading.get("free"),
    )


def _figures(line: dict[str, Any]) -> dict[str, Any]:
    before, after = line.get("before") or {}, line.get("after") or {}
    pools = line.get("graph_pools", [])
    first, last = _reading(before, pools), _reading(after, pools)
    peak = line.get("device_peak")
    figures: dict[str, Any] = ledger(
        first,
        last,
        peak_allocated=first.allocated,  # no peak reset inside the program: not read
        device_peak=None if peak is None or not before else int(peak),
    )
    del figures["pool_output_bytes"]  # which output lies in the pool is not known: left empty
    figures.update(
        segments=int(line.get("graphs") or 0),
        graph_nodes=line.get("nodes"),
        warmup_ms=max(0.0, float(line.get("warmup_ms") or 0.0)),
        capture_ms=max(0.0, float(line.get("capture_ms") or 0.0)),
    )
    return figures


_SUMMED = (
    "segments",
    "pool_delta_bytes",
    "torch_allocated_delta_bytes",
    "torch_reserved_delta_bytes",
    "device_used_delta_bytes",
    "non_torch_delta_bytes",
    "warmup_ms",
    "capture_ms",
    "pool_live_delta_bytes",
    "pool_free_delta_bytes",
    "outside_pool_delta_bytes",
)


def _combine(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Two calls of one bucket in one process: their growth summed, the later readings kept."""
    out = dict(new)
    for key in _SUMMED:
        out[key] = old[key] + new[key]
    for key in ("graph_nodes", "process_used_delta_bytes"):
        out[key] = None if old[key] is None or new[key] is None else old[key] + new[key]
    peaks = [
        p for p in (old["device_peak_delta_bytes"], new["device_peak_delta_bytes"]) if p is not None
    ]
    out["device_peak_delta_bytes"] = max(peaks) if peaks else None
    return out


def merge(lines: Iterable[dict[str, Any]]) -> Merged:
    """The report rows the lines of every process make (see the module docstring)."""
    out = Merged()
    lines, out.malformed, out.malformed_first = well_formed(lines)
    # groups with sized rows: a line without a size there is numbered apart, in UNBUCKETED, so that
    # its number never merges with a bucket's size (a graph outside a --bucket function, a lone
    # graph inside vLLM's estimate)
    sized = {line["group"] for line in lines if line["kind"] == BUCKET and line.get("size")}
    rank_of: dict[int, Optional[int]] = {}
    buckets: dict[tuple[int, str, int], dict[str, Any]] = {}  # (pid, group, size) -> figures
    status: dict[tuple[int, str, int], tuple[str, str]] = {}
    first_seen: dict[tuple[int, str, int], int] = {}
    ordinals: dict[tuple[int, str], int] = {}
    writer: dict[str, int] = {}  # group -> the process that wrote its trace
    origin: dict[tuple[int, str, int], str] = {}  # an unbucketed row's own group
    for n, line in enumerate(lines):
        pid, kind = line["pid"], line["kind"]
        if kind == PROCESS:
            out.processes.append({k: v for k, v in line.items() if k != "kind"})
            rank_of.setdefault(pid, line.get("rank"))
        elif kind == TRACE:
            # a process's latest line of a group counts, and a process that wrote the group's
            # trace beats one that said why it has none (a rank that traces nothing, a graph
            # without a size seen before the group's first bucket)
            group = str(line.get("group"))
            traced = {
                "pid": pid,
                "written": line.get("state") == "written",
                "note": str(line.get("note") or "")[:300],
            }
            if writer.get(group, pid) == pid:  # no process wrote it yet, or this one did
                out.traces[group] = traced
                if traced["written"]:
                    writer[group] = pid
        elif kind == PHASE:
            if line.get("event") == "begin":
                out.phases_open += 1
            elif line.get("event") == "end":
                out.phases_open -= 1
                out.phases_ended += 1
        elif kind == BUCKET:
            group = str(line.get("group"))
            if line.get("rank") is not None:
                rank_of[pid] = line["rank"]
            rank_of.setdefault(pid, None)
            # an int up to MAX_BUCKET_SIZE or None (shape.py); 0 is no size
            size = line.get("size") or None
            # one row per graph: its place among the group's graphs
            if size is None:
                own = group
                if group in sized:
                    out.unbucketed[group] = out.unbucketed.get(group, 0) + 1
                    group = RecordGroup.UNBUCKETED.value
                ordinals[(pid, group)] = ordinals.get((pid, group), 0) + 1
                size = ordinals[(pid, group)]
                if group != own:
                    origin[(pid, group, size)] = own
                if line.get("alone", True):
                    out.graphs_alone += 1
                else:
                    by = str(line.get("by") or USER_LABEL)
                    out.unsized_calls[by] = out.unsized_calls.get(by, 0) + 1
            else:
                out.bucket_calls += 1
            key = (pid, group, size)
            if isinstance(line.get("hook_ms"), (int, float)):
                out.hook_ms.append(float(line["hook_ms"]))
            figures = _figures(line)
            buckets[key] = _combine(buckets[key], figures) if key in buckets else figures
            _extend_span(out.spans, pid, line)
            first_seen.setdefault(key, n)
            if key not in status or status[key][0] == BucketStatus.OK:
                status[key] = (str(line.get("status", "ok")), str(line.get("detail", "")))
    for key, figures in list(buckets.items()):
        # readings of the right shape whose differences (or sums) a report cannot hold
        problem = figures_problem(figures)
        if problem:
            out.malformed += 1
            out.malformed_first = out.malformed_first or f"bucket {key[2]}: {problem}"
            del buckets[key]
    for key, own in origin.items():
        if key in status and not status[key][1]:
            status[key] = (status[key][0], f"captured in {own}, outside its bucket function")
    ranks = _assign_ranks(rank_of, out)
    for key in sorted(buckets, key=lambda k: (ranks[k[0]], first_seen[k])):
        pid, group, size = key
        if group not in out.groups:
            out.groups.append(group)
        seq = out.sequences.setdefault(group, [])
        if size not in seq:
            seq.append(size)
    if len(out.buckets) > MAX_RECORDED_BUCKETS:
        raise MergeError(
            f"the program captured {len(out.buckets)} distinct bucket sizes, more than the "
            f"{MAX_RECORDED_BUCKETS} a report holds"
        )
    place = {g: i for i, g in enumerate(out.groups)}
    seen_pairs: dict[tuple[str, int], set[int]] = {}
    for key in sorted(
        buckets, key=lambda k: (place[k[1]], ranks[k[0]], out.sequences[k[1]].index(k[2]))
    ):
        pid, group, size = key
        state, detail = status[key]
        record = BucketRecord(
            mode=group,
            bucket=size,
            order=out.sequences[group].index(size),
            status=state,
            rank=ranks[pid],
            pid=pid,
            detail=detail,
            retained_output_bytes=0,
            **buckets[key],
        )
        out.rows.append(record)
        seen_pairs.setdefault((group, ranks[pid]), set()).add(size)
    out.tp = max(ranks.values(), default=0) + 1
    for (group, rank), sizes in seen_pairs.items():
        if sizes != set(out.sequences[group]):
            out.complete = False
            out.notes.append(
                f"rank {rank} captured {len(sizes)} of {group}'s {len(out.sequences[group])} "
                "buckets"
            )
    _drop_gaps(out)
    for trace in out.traces.values():
        trace["rank"] = ranks.get(trace["pid"])
    for span in out.spans.values():
        span.rank = ranks.get(span.pid)
    return out


def _extend_span(spans: dict[int, Span], pid: int, line: dict[str, Any]) -> None:
    """A bucket line read into its process's span (lines of one process come in time order); a
    line without both readings (CUDA not yet started) has no place in it."""
    before, after = line.get("before") or {}, line.get("after") or {}
    if not isinstance(before.get("used"), int) or not isinstance(after.get("used"), int):
        return
    span = spans.setdefault(pid, Span(pid, first=before["used"]))
    span.last = after["used"]
    span.in_rows += after["used"] - before["used"]
    span.buckets += 1
    # a process's lines are written as its buckets end: one that began before the previous ended
    # ran beside it, on another thread
    began, ended = before.get("time"), after.get("time")
    if isinstance(began, (int, float)) and isinstance(ended, (int, float)):
        if span.last_end is not None and began < span.last_end:
            span.overlapping += 1
        span.last_end = max(ended, span.last_end or ended)


def _assign_ranks(rank_of: dict[int, Optional[int]], out: Merged) -> dict[int, int]:
    """Each process's rank; a process without one, or one another process already has, takes the
    next free."""
    ranks: dict[int, int] = {}
    taken: set[int] = set()
    for pid, rank in sorted(rank_of.items(), key=lambda kv: (kv[1] is None, kv[1] or 0, kv[0])):
        if rank is None or rank in taken or not 0 <= rank < MAX_TP:
            free = next((r for r in range(MAX_TP) if r not in taken), None)
            if free is None:
                raise MergeError(
                    f"more than {MAX_TP} processes captured graphs; a report holds at most "
                    f"{MAX_TP} ranks"
                )
            if rank is not None:
                out.notes.append(
                    f"process {pid} said rank {rank}, which another process has: recorded as rank "
                    f"{free}"
                )
            rank = free
        ranks[pid] = rank
        taken.add(rank)
    return ranks


def _drop_gaps(out: Merged) -> None:
    """A rank whose rows skip a bucket of its group's order keeps the rows before the gap only (a
    report's rows of a mode are the first buckets of its order), and the report says so."""
    kept: list[BucketRecord] = []
    by_pair: dict[tuple[str, int], set[int]] = {}
    for r in out.rows:
        by_pair.setdefault((r.mode, r.rank), set()).add(r.order)
    for r in out.rows:
        orders = by_pair[(r.mode, r.rank)]
        if all(o in orders for o in range(r.order)):
            kept.append(r)
        else:
            out.notes.append(
                f"{r.mode} rank {r.rank} bucket {r.bucket} left out: the rank did not capture a "
                "bucket before it in the group's order"
            )
    out.rows = kept
