"""The allocator model against a real capture: the floor of gpt-oss-20b at 16384 tokens on an H200
(torch 2.11.0+cu130), whose allocator history ``--snapshot`` kept in the committed report.

Turned into a trace (:class:`bcgprof.measure.trace_events.TraceBuilder`) and replayed, every one of
the pool's 1,815 allocations lands at the address the real allocator gave it, every segment opens
where it opened, and the pool ends at the bytes the report measured. Nothing here was fitted to
that capture: the rules are the allocator's source.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import pytest

from bcgprof.analysis.predict.replay import Replayer
from bcgprof.measure.trace_events import TraceBuilder
from bcgprof.report import read_report
from bcgprof.report.traces import Action, Trace, TracePool, read_trace, write_trace

REPORT = Path("reports/gpt-oss-20b-h200-snapshot")


@pytest.fixture(scope="module")
def snapshot() -> dict:
    return pickle.loads(gzip.decompress((REPORT / "floor.snapshot.pickle.gz").read_bytes()))


@pytest.fixture(scope="module")
def trace(snapshot, tmp_path_factory) -> Trace:
    pool = next(
        tuple(s["segment_pool_id"])
        for s in snapshot["segments"]
        if tuple(s["segment_pool_id"]) != (0, 0)
    )
    builder = TraceBuilder(pool)
    rows = builder.window(snapshot["device_traces"][0], snapshot["segments"], 16384, "capture")
    made = Trace(
        mode="floor",
        torch_version="2.11.0+cu130",
        pool=pool,
        settings=snapshot["allocator_settings"],
        buckets=[16384],
        rows=rows,
    )
    # through the file format too
    return read_trace(write_trace(tmp_path_factory.mktemp("real"), made))


def test_the_snapshot_is_the_committed_floor_capture(snapshot):
    assert read_report(REPORT).run.torch_version == "2.11.0+cu130"
    assert snapshot["allocator_settings"]["expandable_segments"] is False


def test_every_block_and_segment_of_a_real_pool_is_where_the_model_puts_it(trace):
    graph = [r for r in trace.rows if r.pool == TracePool.GRAPH]
    allocs = [r for r in graph if r.action == Action.ALLOC]
    segments = [r for r in graph if r.action == Action.SEGMENT_ALLOC]
    assert len(allocs) > 1500 and len(segments) == 13  # small and large segments, 2 MiB to 720 MiB
    replay = Replayer({"floor": trace}).check("floor")
    assert replay.mismatches == 0
    measured = next(r.pool_bytes for r in read_report(REPORT).buckets if r.mode == "floor")
    assert replay.pool_bytes == [measured] == [sum(r.size for r in segments)]
    assert replay.exact


def test_the_ordinary_pools_keep_only_their_segments_and_a_peak(trace):
    other = [r for r in trace.rows if r.pool == TracePool.OTHER]
    assert {r.action for r in other} <= {Action.SEGMENT_ALLOC, Action.SEGMENT_FREE, Action.PEAK}
    peak = next(r for r in other if r.action == Action.PEAK)
    assert peak.size > 0
