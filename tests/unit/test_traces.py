"""The allocator trace file (``traces-<mode>.csv.gz``): what the builder makes of an allocator
history, a round trip through the file, and the one-line refusals of malformed files."""

from __future__ import annotations

import gzip
import json

import pytest

from bcgprof.measure.trace_events import TraceBuilder
from bcgprof.report.traces import (
    Trace,
    TraceError,
    TraceFileWriter,
    TracePool,
    TraceRow,
    read_trace,
    trace_bytes,
    write_trace,
)

POOL = (0, 7)
MIB = 1 << 20
GRAPH_SEG, OTHER_SEG = 0x7F00_0000_0000, 0x7E00_0000_0000


def _e(action, addr, size, stream=111):
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": stream,
        "time_us": 0,
        "frames": [],
    }


def _seg(addr, size, pool=(0, 0)):
    return {
        "address": addr,
        "total_size": size,
        "segment_pool_id": pool,
        "stream": 111,
        "blocks": [],
    }


def test_the_builder_labels_pool_events_by_address_in_time_and_pairs_frees():
    builder = TraceBuilder(POOL)
    builder.seed([_seg(OTHER_SEG, 20 * MIB)])  # an ordinary segment from before recording
    warm = [
        _e("alloc", OTHER_SEG, 4 * MIB),
        _e("free_requested", OTHER_SEG, 4 * MIB),
        _e("free_completed", OTHER_SEG, 4 * MIB),
        _e("segment_alloc", GRAPH_SEG, 2 * MIB),
        _e("segment_free", GRAPH_SEG, 2 * MIB),
    ]  # ordinary, same VA
    rows = builder.window(warm, [_seg(OTHER_SEG, 20 * MIB)], 64, "warmup")
    assert [(r.pool, r.action) for r in rows] == [
        ("other", "segment_exists"),
        ("other", "segment_alloc"),
        ("other", "segment_free"),
        ("other", "peak"),
    ]
    assert rows[-1].size == 4 * MIB  # the ordinary pools' allocated bytes rose by 4 MiB at most
    capture = [
        _e("segment_alloc", GRAPH_SEG, 20 * MIB),
        _e("alloc", GRAPH_SEG, 3 * MIB),
        _e("alloc", GRAPH_SEG + 3 * MIB, 512),
        _e("free_requested", GRAPH_SEG, 3 * MIB),  # deferred: used on another stream
        _e("alloc", GRAPH_SEG + 3 * MIB + 512, 700),
        _e("free_completed", GRAPH_SEG, 3 * MIB),
        _e("snapshot", 0, 0),
    ]
    rows = builder.window(
        capture, [_seg(OTHER_SEG, 20 * MIB), _seg(GRAPH_SEG, 20 * MIB, POOL)], 64, "capture"
    )
    graph = [(r.action, r.id, r.segment, r.offset) for r in rows if r.pool == TracePool.GRAPH]
    assert graph == [
        ("segment_alloc", 3, None, None),
        ("alloc", 2, 3, 0),
        ("alloc", 3, 3, 3 * MIB),
        ("free_requested", 2, 3, 0),
        ("alloc", 4, 3, 3 * MIB + 512),
        ("free_completed", 2, 3, 0),
    ]
    assert rows[0].address == GRAPH_SEG and rows[0].size == 20 * MIB


def test_the_segment_an_address_lies_in_is_looked_up_again_when_segments_open_or_close():
    # The builder remembers which segment holds an address; a segment opening over an address seen
    # outside any segment, or closing and opening again as the graph pool's, must be seen.
    builder = TraceBuilder(POOL)
    builder.seed([])
    events = [
        _e("alloc", GRAPH_SEG, 600),
        _e("free_completed", GRAPH_SEG, 600),  # no segment known
        _e("segment_alloc", GRAPH_SEG, 2 * MIB),
        _e("alloc", GRAPH_SEG, 600),
        _e("segment_alloc", OTHER_SEG, 2 * MIB),
        _e("alloc", OTHER_SEG, MIB),
        _e("free_completed", OTHER_SEG, MIB),
        _e("segment_free", OTHER_SEG, 2 * MIB),
        _e("segment_alloc", OTHER_SEG, 2 * MIB),
        _e("alloc", OTHER_SEG, MIB, stream=222),
    ]
    rows = builder.window(
        events, [_seg(GRAPH_SEG, 2 * MIB, POOL), _seg(OTHER_SEG, 2 * MIB, POOL)], 8, "capture"
    )
    assert [(r.pool, r.action, r.id, r.segment, r.stream) for r in rows] == [
        ("graph", "segment_alloc", 1, None, 0),
        ("graph", "alloc", 2, 1, 0),
        ("other", "segment_alloc", 2, None, 0),
        ("other", "segment_free", 2, None, 0),
        ("graph", "segment_alloc", 3, None, 0),
        ("graph", "alloc", 4, 3, 1),
        ("other", "peak", None, None, 0),
    ]
    assert rows[-1].size == MIB  # the ordinary pools' growth: the graph pool's blocks are not in it


def test_a_trace_round_trips_through_its_file(tmp_path):
    rows = [
        TraceRow(8, "capture", "graph", "segment_alloc", 1, 2 * MIB, 0, address=1 << 40),
        TraceRow(8, "capture", "graph", "alloc", 1, 1000, 0, 1, 0),
        TraceRow(8, "capture", "other", "peak", None, 5, 0),
        TraceRow(4, "warmup", "graph", "free_completed", 1, 1000, 0, 1, 0),
    ]
    trace = Trace(
        mode="shared",
        torch_version="2.11.0",
        pool=POOL,
        settings={"max_split_size": -1},
        buckets=[8, 4],
        rows=rows,
    )
    path = write_trace(tmp_path, trace)
    # no timestamp inside
    assert path.name == "traces-shared.csv.gz" and trace_bytes(trace) == path.read_bytes()
    back = read_trace(path)
    assert (
        back.rows == rows and back.buckets == [8, 4] and back.pool == POOL and back.mode == "shared"
    )


def test_a_trace_written_bucket_after_bucket_is_the_one_shot_file_each_time(tmp_path):
    # The capture rewrites the file after every bucket through one writer that compresses each row
    # once; each of those files must be the file a one-shot write of the same rows gives, read back
    # whole.
    trace = Trace(mode="per-bucket", torch_version="2.11.0", pool=POOL)
    writer = TraceFileWriter(trace)
    trace.rows.append(
        TraceRow(64, "capture", "graph", "segment_alloc", 1, 1 << 30, 0, address=1 << 40)
    )
    for n, bucket in enumerate([64, 32, 16], start=1):
        trace.buckets.append(bucket)
        trace.rows += [
            TraceRow(
                bucket, "capture", "graph", "alloc", 1000 * n + k, 512 * k + bucket, 0, 1, 512 * k
            )
            for k in range(1, 400)
        ]
        path = writer.write(tmp_path)
        assert path.read_bytes() == trace_bytes(trace)
        back = read_trace(path)
        assert back.rows == trace.rows and back.buckets == trace.buckets
    trace.rows.pop()
    with pytest.raises(ValueError, match="removed"):
        writer.file_bytes()


def _file(tmp_path, lines: list[str], header: dict | None = None) -> object:
    head = {
        "format": "bcgprof-allocator-trace",
        "version": 1,
        "mode": "per-bucket",
        "pool": [0, 1],
        "settings": {},
        "buckets": [8],
        "incomplete": [],
    }
    head.update(header or {})
    text = (
        "#"
        + json.dumps(head)
        + "\nbucket,phase,pool,action,id,size,stream,segment,offset,address\n"
    )
    path = tmp_path / "traces-per-bucket.csv.gz"
    path.write_bytes(gzip.compress((text + "".join(line + "\n" for line in lines)).encode()))
    return path


SEG = "8,capture,graph,segment_alloc,1,2097152,0,,,1099511627776"


@pytest.mark.parametrize(
    "lines, header, message",
    [
        ([SEG, "8,capture,graph,alloc,1,512,0,1,0"], None, "10 columns"),
        ([SEG, "8,capture,graph,alloc,1,-512,0,1,0,"], None, "column size"),
        ([SEG, "8,capture,graph,allocate,1,512,0,1,0,"], None, "unknown phase, pool or action"),
        ([SEG, "8,capture,graph,alloc,1,5x,0,1,0,"], None, "'5x' is not an integer"),
        (
            [SEG, "8,capture,graph,alloc,1,99999999999999999999,0,1,0,"],
            None,
            "column size: .* is out of range",
        ),
        ([SEG, "8,capture,graph,free_completed,9,512,0,1,0,"], None, "no earlier row allocated"),
        ([SEG, "16,capture,graph,alloc,1,512,0,1,0,"], None, "bucket 16 is not in the header"),
        (
            [
                "8,capture,other,segment_alloc,1,2097152,0,,,1099511627776",
                "8,capture,graph,alloc,1,512,0,1,0,",
            ],
            None,
            "not a graph-pool segment",
        ),
        (
            [SEG, "8,capture,graph,alloc,1,512,0,1,0,", "8,capture,graph,alloc,1,512,0,1,512,"],
            None,
            "without a new allocation number",
        ),
        ([], {"version": 9}, "format version 9"),
        ([], {"mode": "sideways"}, "unknown mode"),
        ([], {"format": "other"}, "not a bcgprof-allocator-trace file"),
    ],
)
def test_a_malformed_trace_is_refused_with_one_line(tmp_path, lines, header, message):
    with pytest.raises(TraceError, match=message) as caught:
        read_trace(_file(tmp_path, lines, header))
    assert "\n" not in str(caught.value) and "re-capture" in str(caught.value)


def test_files_that_are_not_traces_are_refused(tmp_path, monkeypatch):
    plain = tmp_path / "traces-per-bucket.csv.gz"
    plain.write_text("bucket,phase\n")
    with pytest.raises(TraceError, match="gzip"):
        read_trace(plain)
    plain.write_bytes(gzip.compress(b"no header\n"))
    with pytest.raises(TraceError, match="first line is not the trace header"):
        read_trace(plain)
    import bcgprof.report.traces as traces

    good = _file(tmp_path, [SEG])
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 10)
    with pytest.raises(TraceError, match="more than the 10"):
        read_trace(good)


def test_a_trace_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "traces-shared.csv.gz"
    os.mkfifo(fifo)  # nobody writes to it: a blocking open or read would hang the test
    with pytest.raises(TraceError, match="not a regular file"):
        read_trace(fifo)
    folder = tmp_path / "traces-per-bucket.csv.gz"
    folder.mkdir()
    with pytest.raises(TraceError, match="a directory, not a regular file"):
        read_trace(folder)
    with pytest.raises(TraceError, match="is missing"):
        read_trace(tmp_path / "traces-floor.csv.gz")


def test_an_oversized_trace_is_refused_before_it_is_read(tmp_path):
    from bcgprof.report.traces import MAX_TRACE_BYTES

    big = tmp_path / "traces-shared.csv.gz"
    with open(big, "wb") as f:
        f.truncate(MAX_TRACE_BYTES + 1)  # sparse: no disk used
    with pytest.raises(TraceError, match=f"{MAX_TRACE_BYTES + 1} bytes, more than"):
        read_trace(big)


def test_a_trace_past_a_reading_cap_is_written_whole_and_says_so_once(tmp_path, monkeypatch):
    import bcgprof.report.traces as traces_module

    monkeypatch.setattr(traces_module, "MAX_ROWS", 500)
    trace = Trace(mode="shared", torch_version="2.11.0", pool=POOL)
    writer = TraceFileWriter(trace)
    for bucket, n in ((64, 400), (32, 200)):
        trace.buckets.append(bucket)
        trace.rows += [
            TraceRow(bucket, "capture", "graph", "alloc", k, 512 * k, 0, 1, 512 * k)
            for k in range(1, n + 1)
        ]
        writer.write(tmp_path)
        if bucket == 64:
            assert writer.over_caps is None  # 400 rows: within the cap
    assert writer.over_caps is not None
    assert "600 rows over the 500" in writer.over_caps
    assert "traces-shared.csv.gz" in writer.over_caps and "predict" in writer.over_caps
    assert (tmp_path / "traces-shared.csv.gz").read_bytes() == trace_bytes(trace)  # whole
