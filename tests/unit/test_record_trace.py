"""``bcgprof record --trace`` inside the program, on the CPU: the hook's trace windows over a
stand-in for ``torch.cuda.memory`` (segments, and ``device_traces`` entries as the allocator's
history gives them), the file read back and replayed by predict, and the cases that get no trace."""

from __future__ import annotations

import dataclasses
import gzip
import inspect
import shutil
import time

import pytest

from bcgprof.analysis.predict.lists import predict_buckets
from bcgprof.analysis.predict.replay import verify_trace
from bcgprof.analysis.predict.trace_set import mode_trace
from bcgprof.errors import BcgprofError, PredictionError
from bcgprof.record import adapters as table
from bcgprof.record import hook
from bcgprof.record.history import GroupTracer
from bcgprof.record.merge import merge
from bcgprof.record.rows import LineReader, spool_of
from bcgprof.record.session import RecordOptions, _run_info, check_options
from bcgprof.report import read_report
from bcgprof.report.trace_read import read_columns
from bcgprof.report.write import ReportWriter
from bcgprof.vocab import RunStatus

MIB = 1 << 20
POOL, OTHER_POOL = (0, 5), (0, 9)
GRAPH_SEG, SECOND_SEG, EAGER_SEG = 0x7F00_0000_0000, 0x7F10_0000_0000, 0x7E00_0000_0000


class FakeMemory:
    """``torch.cuda.memory``'s ``_snapshot`` and ``_record_memory_history``: segments by address,
    and the history's entries while it is on (turning it off clears it, as torch's does)."""

    def __init__(self, settings: dict | None = None):
        self.segments: dict[int, dict] = {}
        self.entries: list[dict] = []
        self.on = False
        self.switches = 0
        self.settings = settings or {}

    def _record_memory_history(self, enabled="all", **_):
        self.switches += 1
        self.on = enabled is not None
        if not self.on:
            self.entries = []

    def _snapshot(self):
        return {
            "segments": [dict(s) for s in self.segments.values()],
            "device_traces": [list(self.entries)],
            "allocator_settings": dict(self.settings),
        }

    def _event(self, action, addr, size, stream=7):
        if self.on:
            self.entries.append({"action": action, "addr": addr, "size": size, "stream": stream})

    def segment(self, addr, size, pool=(0, 0)):
        self.segments[addr] = {
            "device": 0,
            "address": addr,
            "total_size": size,
            "segment_pool_id": pool,
            "stream": 7,
            "blocks": [],
        }
        self._event("segment_alloc", addr, size)

    def drop(self, addr):
        self._event("segment_free", addr, self.segments.pop(addr)["total_size"])

    def alloc(self, addr, size):
        self._event("alloc", addr, size)

    def free(self, addr, size):
        self._event("free_requested", addr, size)
        self._event("free_completed", addr, size)

    def pool_bytes(self, pool):
        return sum(s["total_size"] for s in self.segments.values() if s["segment_pool_id"] == pool)


class Graph:
    def __init__(self, pool):
        self._pool = pool

    def pool(self):
        return self._pool


class Program:
    """A recorded process: the hook's recorder with stand-in readings and memory, one bucket
    function ``loops:capture_one:size``."""

    def __init__(self, tmp_path, memory: FakeMemory | None = None, rank=None):
        self.report = tmp_path / "report"
        self.report.mkdir()
        spool = spool_of(self.report)
        self.memory = memory or FakeMemory()
        self.rec = hook.Recorder(str(spool), [], sample_ms=0)
        self.rec.read = self.reading
        self.rec.tracer = GroupTracer(
            self.report, spool, self.rec.lines.write, self.memory, 0, lambda: rank
        )
        self.adapter = table.parse_bucket_option("loops:capture_one:size")
        self.signature = inspect.signature(lambda size: None)

    def reading(self):
        pools = {f"{p[0]},{p[1]}": [self.memory.pool_bytes(p)] * 2 for p in (POOL, OTHER_POOL)}
        reserved = sum(s["total_size"] for s in self.memory.segments.values())
        return {
            "allocated": 0,
            "reserved": reserved,
            "used": reserved + 100 * MIB,
            "process": reserved,
            "free": 10**12,
            "pools": pools,
            "time": time.time(),
        }

    def bucket(self, size, warmup, capture, pools=(POOL,), group=None):
        adapter = self.adapter
        if group is not None:
            adapter = table.Adapter(**{**adapter.__dict__, "group": group})
        token = self.rec.enter(adapter, None, self.signature, (size,), {})
        warmup(self.memory)
        for pool in pools:
            self.rec.graph_begins()
            capture(self.memory)
            self.rec.graph_ends(Graph(pool))
        self.rec.leave(token, None)

    def lines(self):
        return LineReader(spool_of(self.report)).read()

    def traces(self):
        return [line for line in self.lines() if line["kind"] == "trace"]

    def write_report(self):
        merged = merge(self.lines())
        options = RecordOptions(command=["python", "loop.py"], out=self.report, trace=True)
        ReportWriter(
            self.report, _run_info(options, merged, [], RunStatus.COMPLETE, "now"), merged.rows
        )
        return read_report(self.report)


def _eager(memory):
    """A warm-up in the ordinary pools: a segment, a block in it, freed."""
    if EAGER_SEG not in memory.segments:
        memory.segment(EAGER_SEG, 20 * MIB)
    memory.alloc(EAGER_SEG, 6 * MIB)
    memory.free(EAGER_SEG, 6 * MIB)


def _first(memory):
    """Bucket 8's capture: a pool segment, a kept output, a freed activation."""
    memory.segment(GRAPH_SEG, 20 * MIB, POOL)
    memory.alloc(GRAPH_SEG, 8 * MIB)
    memory.alloc(GRAPH_SEG + 8 * MIB, 2 * MIB)
    memory.free(GRAPH_SEG + 8 * MIB, 2 * MIB)


def _second(memory):
    """Bucket 4's capture, in bucket 8's segment."""
    memory.alloc(GRAPH_SEG + 8 * MIB, 4 * MIB)
    memory.alloc(GRAPH_SEG + 12 * MIB, 3 * MIB)
    memory.free(GRAPH_SEG + 12 * MIB, 3 * MIB)


def test_a_recorded_group_traces_its_windows_and_predict_replays_its_own_pool(tmp_path):
    program = Program(tmp_path)
    program.memory.segment(EAGER_SEG, 20 * MIB)  # there before the group: a segment_exists row
    program.bucket(8, _eager, _first)
    program.bucket(4, _eager, _second)
    path = program.report / "traces-graphs.csv.gz"
    columns = read_columns(path)
    head = columns.head
    assert head["mode"] == "graphs" and head["pool"] == list(POOL) and head["buckets"] == [8, 4]
    rows = [
        (r[0], r[1], r[2], r[3])
        for r in (
            line.split(",") for line in gzip.decompress(path.read_bytes()).decode().splitlines()[2:]
        )
    ]
    # bucket 8: the segment there before, the warm-up's peak, then the capture's pool events
    assert rows[0] == ("8", "warmup", "other", "segment_exists")
    assert ("8", "warmup", "other", "peak") in rows
    assert [r for r in rows if r[0] == "8" and r[2] == "graph"] == [
        ("8", "capture", "graph", "segment_alloc"),
        ("8", "capture", "graph", "alloc"),
        ("8", "capture", "graph", "alloc"),
        ("8", "capture", "graph", "free_completed"),
    ]
    assert [r[1] for r in rows if r[0] == "4" and r[2] == "graph"] == ["capture"] * 3
    # the replay of the trace's own list gives the pool the readings measured
    verify_trace(mode_trace(columns), [(8, 20 * MIB), (4, 20 * MIB)])
    assert [(t["group"], t["state"]) for t in program.traces()] == [("graphs", "written")]
    report = program.write_report()
    assert report.run.extra["recorded"]["traces"]["graphs"]["written"] is True
    prediction = predict_buckets(report, [8, 4])
    assert [r.pool_bytes for r in prediction.modes[0].buckets] == [20 * MIB, 20 * MIB]
    assert program.memory.on  # between a group's buckets the history stays on
    program.rec.tracer.stop()
    assert not program.memory.on


def test_the_history_is_off_outside_the_group_and_a_size_captured_again_at_once_stays_one_run(
    tmp_path,
):
    program = Program(tmp_path)
    assert not program.memory.on
    program.bucket(8, _eager, _first)
    program.bucket(4, _eager, _second)
    program.bucket(
        4,
        _eager,
        lambda m: (m.alloc(GRAPH_SEG + 12 * MIB, 3 * MIB), m.free(GRAPH_SEG + 12 * MIB, 3 * MIB)),
    )
    head = read_columns(program.report / "traces-graphs.csv.gz").head
    assert head["buckets"] == [8, 4]
    # the two calls of bucket 4 are one row, and the trace replays to it
    report = program.write_report()
    assert [r.bucket for r in report.buckets] == [8, 4]
    assert [r.pool_bytes for r in predict_buckets(report, [8, 4]).modes[0].buckets] == [
        20 * MIB,
        20 * MIB,
    ]
    traced = report.run.extra["recorded"]["traces"]["graphs"]
    assert traced["rank"] == 0 and traced["pid"] == report.buckets[0].pid


@pytest.mark.parametrize(
    "case, why",
    [
        ("two pools", "more than one graph pool"),
        ("two pools at once", "more than one graph pool"),
        ("pool held before", "held 20971520 bytes of segments before its first bucket"),
        ("other pool holds bytes", "other graph pools held"),
        ("expandable", "expandable_segments"),
        ("size again later", "bucket 8 was captured again after other buckets"),
        ("no graph", "captured no graph"),
        ("a graph alone amid", "a graph without a size"),
    ],
)
def test_a_group_that_cannot_be_replayed_gets_no_trace_and_a_note(tmp_path, case, why):
    memory = FakeMemory({"expandable_segments": True} if case == "expandable" else None)
    program = Program(tmp_path, memory)
    if case == "pool held before":
        memory.segment(GRAPH_SEG, 20 * MIB, POOL)
    if case == "other pool holds bytes":
        program.rec.pools.add(OTHER_POOL)
        memory.segment(SECOND_SEG, 2 * MIB, OTHER_POOL)
    pools = (POOL, OTHER_POOL) if case == "two pools at once" else (POOL,)
    program.bucket(8, _eager, (lambda m: None) if case == "pool held before" else _first, pools)
    if case == "two pools":
        program.bucket(4, _eager, _second, pools=(POOL, OTHER_POOL))
    elif case == "size again later":
        program.bucket(4, _eager, _second)
        program.bucket(8, _eager, lambda m: None)
    elif case == "no graph":
        token = program.rec.enter(program.adapter, None, program.signature, (4,), {})
        program.rec.leave(token, None)
    elif case == "a graph alone amid":
        program.rec.graph_begins()  # outside the bucket function: its row is numbered
        _second(program.memory)
        program.rec.graph_ends(Graph(POOL))
        program.bucket(4, _eager, lambda m: None)
    assert not (program.report / "traces-graphs.csv.gz").exists()
    notes = [t["note"] for t in program.traces() if t["state"] == "none"]
    assert len(notes) == 1 and why in notes[0] and notes[0].startswith("no trace of graphs: ")
    assert not memory.on
    report = program.write_report()
    assert why in report.run.extra["recorded"]["traces"]["graphs"]["note"]
    with pytest.raises(PredictionError, match="record it with --trace|no allocator trace"):
        predict_buckets(report, [8])


def test_graphs_without_a_bucket_function_torch_compile_and_other_ranks_are_not_traced(tmp_path):
    program = Program(tmp_path)
    program.rec.graph_begins()  # no bucket function: a row per graph
    _first(program.memory)
    program.rec.graph_ends(Graph(POOL))
    program.bucket(8, _eager, _second, group="compiled")
    notes = [t["note"] for t in program.traces()]
    assert "outside a bucket function" in notes[0] and "cudagraph trees" in notes[1]
    assert program.memory.switches == 0  # the history was never turned on

    (tmp_path / "rank1").mkdir()
    ranked = Program(tmp_path / "rank1", rank=1)
    ranked.bucket(8, _eager, _first)
    assert ranked.traces() == [] and ranked.memory.switches == 0


@pytest.mark.parametrize(
    "held, why",
    [
        (None, ""),
        (OTHER_POOL, "the process's other graph pools held 4194304 bytes at bucket 8"),
        (POOL, "held 4194304 bytes of segments before its first bucket"),
    ],
)
def test_a_graph_without_a_size_before_the_first_bucket_leaves_the_group_traceable(
    tmp_path, held, why
):
    """A graph captured before a --bucket function's first call (a warm-up graph) is a row of
    unbucketed, and the buckets' trace is written after all, unless that graph's segments are
    still held (in their pool: a replay starts from an empty one; in another: the rows' pool
    figure counts it), each refusal saying so rather than asking for --bucket."""
    program = Program(tmp_path)
    program.rec.graph_begins()
    if held is not None:
        program.memory.segment(SECOND_SEG, 4 * MIB, held)
    program.rec.graph_ends(Graph(held or OTHER_POOL))
    program.bucket(8, _eager, _first)
    program.bucket(4, _eager, _second)
    notes = [t["note"] for t in program.traces() if t["state"] == "none"]
    assert "outside a bucket function" in notes[0]
    report = program.write_report()
    traced = report.run.extra["recorded"]["traces"]["graphs"]
    assert [(r.mode, r.bucket) for r in report.buckets] == [
        ("unbucketed", 1),
        ("graphs", 8),
        ("graphs", 4),
    ]
    if held is None:
        assert traced["written"] is True
        assert read_columns(program.report / "traces-graphs.csv.gz").head["buckets"] == [8, 4]
    else:
        assert traced["written"] is False and why in traced["note"]
        assert not (program.report / "traces-graphs.csv.gz").exists()


def test_a_graph_without_a_size_after_the_last_bucket_keeps_the_trace(tmp_path):
    """Only a next bucket would take its captures into its window: after the group's last
    bucket (vLLM's estimate captures one so), the buckets' trace stands."""
    program = Program(tmp_path)
    program.bucket(8, _eager, _first)
    program.bucket(4, _eager, _second)
    program.rec.graph_begins()
    program.memory.alloc(GRAPH_SEG + 16 * MIB, MIB)
    program.rec.graph_ends(Graph(POOL))
    program.rec.tracer.stop()
    assert [t["state"] for t in program.traces()] == ["written"]
    assert read_columns(program.report / "traces-graphs.csv.gz").head["buckets"] == [8, 4]
    report = program.write_report()
    assert report.run.extra["recorded"]["traces"]["graphs"]["written"] is True
    assert [(r.mode, r.bucket) for r in report.buckets][-1] == ("unbucketed", 1)


def test_a_process_that_wrote_a_groups_trace_beats_one_that_said_it_has_none():
    def line(pid, state):
        return {"kind": "trace", "pid": pid, "group": "graphs", "state": state, "note": state}

    for lines in (
        [line(1, "written"), line(2, "none")],
        [line(2, "none"), line(1, "written")],
    ):
        assert merge(lines).traces["graphs"]["written"] is True
    # the process that wrote it, refusing it later (its file removed), has the last word, whatever
    # another process (whose file may sort after its) said
    for lines in (
        [line(1, "written"), line(1, "none"), line(2, "other")],
        [line(2, "other"), line(1, "written"), line(1, "none")],
    ):
        traced = merge(lines).traces["graphs"]
        assert traced["written"] is False and traced["note"] == "none" and traced["pid"] == 1


def test_one_process_claims_a_group_and_the_others_leave_it(tmp_path):
    first = Program(tmp_path)
    spool = spool_of(first.report)
    other = GroupTracer(first.report, spool, lambda *a, **k: None, FakeMemory(), 0)
    first.bucket(8, _eager, _first)
    other.bucket_begins("graphs", 8, False)
    assert other.active is None and "graphs" in other.others


def test_trace_without_a_bucket_function_is_refused_before_the_program_starts(tmp_path):
    options = RecordOptions(
        command=["python", "x.py"], out=tmp_path / "r", adapters=False, trace=True
    )
    with pytest.raises(BcgprofError, match="--trace records the groups of bucket functions"):
        check_options(options)
    check_options(RecordOptions(command=["python", "x.py"], out=tmp_path / "r", trace=True))


def test_a_recorded_trace_that_does_not_replay_to_its_rows_is_refused_in_one_line(tmp_path):
    # a 1 MiB block placed in a large segment: the allocator serves it from a small one, so the
    # replay places it elsewhere than recorded, and predict refuses the trace
    program = Program(tmp_path)
    program.bucket(8, _eager, _first)
    program.bucket(4, _eager, lambda m: m.alloc(GRAPH_SEG + 8 * MIB, MIB))
    report = program.write_report()
    with pytest.raises(PredictionError, match="does not replay to the report's own pool") as e:
        predict_buckets(report, [8, 4])
    assert "\n" not in str(e.value)


def test_predict_refuses_a_recording_captured_smallest_first_or_with_two_traced_lists(tmp_path):
    program = Program(tmp_path)
    program.bucket(4, _eager, _first)
    program.bucket(8, _eager, _second)
    with pytest.raises(PredictionError, match="in another order than largest first"):
        predict_buckets(program.write_report(), [8, 4])

    (tmp_path / "two").mkdir()
    program = Program(tmp_path / "two")
    program.bucket(8, _eager, _first)
    program.bucket(4, _eager, _second)
    report = program.write_report()
    # a second traced group, of one bucket
    shutil.copy(report.path / "traces-graphs.csv.gz", report.path / "traces-decode.csv.gz")
    extra = {**report.run.extra, "sequences": {"graphs": [8, 4], "decode": [8]}}
    rows = [*report.buckets, dataclasses.replace(report.buckets[0], mode="decode")]
    two = dataclasses.replace(
        report, run=dataclasses.replace(report.run, extra=extra), buckets=rows
    )
    with pytest.raises(PredictionError, match="hold different bucket lists"):
        predict_buckets(two, [8])
    # without the second trace, that group is left out with a note
    (report.path / "traces-decode.csv.gz").unlink()
    prediction = predict_buckets(two, [8, 4])
    assert [m.mode for m in prediction.modes] == ["graphs"]
    assert any(
        "without an allocator trace left out: no trace of decode" in n for n in prediction.notes
    )
