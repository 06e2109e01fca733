"""The trace recorder's use of torch's allocator history, on the CPU: ``_record_memory_history`` and
``_snapshot`` are stood in for by a fake that behaves like torch's (entries accumulate while
enabled; disabling clears them; re-enabling with other options keeps them)."""

from __future__ import annotations

import pytest
import torch

from bcgprof.measure.tracing import AllocatorRecorder
from bcgprof.report.traces import read_trace

POOL = (0, 3)
MIB = 1 << 20
SEG = 1 << 40


class FakeHistory:
    def __init__(self):
        self.entries: list[dict] = []
        self.enabled = False
        self.calls: list[tuple] = []
        self.segments = [
            {"address": 1 << 39, "total_size": 20 * MIB, "segment_pool_id": (0, 0), "stream": 5}
        ]

    def record(self, enabled="all", context="all", stacks="all", max_entries=0, **kwargs):
        self.calls.append((enabled, context))
        if enabled is None:
            self.enabled = False
            self.entries = []
        else:
            self.enabled = True

    def snapshot(self, *args, **kwargs):
        return {
            "segments": [dict(s) for s in self.segments],
            "device_traces": [list(self.entries)],
            "allocator_settings": {"expandable_segments": False, "max_split_size": -1},
        }

    def event(self, action, addr, size):
        assert self.enabled, "an event the recorder would have missed"
        self.entries.append({"action": action, "addr": addr, "size": size, "stream": 5})


@pytest.fixture
def history(monkeypatch):
    fake = FakeHistory()
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", fake.record)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", fake.snapshot)
    return fake


def test_each_window_is_taken_once_and_the_file_is_written_after_each_capture(history, tmp_path):
    rec = AllocatorRecorder(tmp_path, "per-bucket", POOL)
    rec.start()
    history.event("alloc", (1 << 39) + 512, 1000)  # warm-up: an ordinary block
    rec.take(8, "warmup")
    assert history.entries == []  # taking clears the history
    history.segments.append(
        {"address": SEG, "total_size": 2 * MIB, "segment_pool_id": POOL, "stream": 5}
    )
    history.event("segment_alloc", SEG, 2 * MIB)
    history.event("alloc", SEG, 4096)
    rec.stacks(True)  # the floor's sites: stacks on, nothing cleared
    assert history.entries and history.calls[-1] == ("all", "all")
    history.event("alloc", SEG + 4096, 512)
    snap = rec.capture_done(8)
    assert len(snap["device_traces"][0]) == 3
    rec.stacks(False)
    assert history.calls[-1] == ("all", None)  # back to no stacks
    trace = read_trace(tmp_path / "traces-per-bucket.csv.gz")
    assert trace.buckets == [8] and trace.incomplete == []
    graph = [(r.action, r.size, r.offset) for r in trace.rows if r.pool == "graph"]
    assert graph == [("segment_alloc", 2 * MIB, None), ("alloc", 4096, 0), ("alloc", 512, 4096)]
    rec.stop()
    assert not history.enabled


def test_snapshot_mode_keeps_every_entry_for_the_viewer(history, tmp_path):
    rec = AllocatorRecorder(None, "shared", POOL, keep=100)
    rec.start()
    assert history.calls[-1] == ("all", "all")  # --snapshot: stacks throughout
    history.event("alloc", (1 << 39) + 512, 1000)
    rec.take(8, "warmup")
    history.event("alloc", (1 << 39) + 2048, 1000)
    rec.capture_done(8)  # no report directory: nothing written
    history.event("free_completed", (1 << 39) + 512, 1000)
    viewer = rec.viewer_snapshot()
    assert [e["addr"] for e in viewer["device_traces"][0]] == [
        (1 << 39) + 512,
        (1 << 39) + 2048,
        (1 << 39) + 512,
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_history_the_builder_cannot_read_marks_the_bucket_incomplete_instead_of_failing(
    history, tmp_path
):
    rec = AllocatorRecorder(tmp_path, "per-bucket", POOL)
    rec.start()
    history.entries.append({"action": "alloc", "addr": "not an address", "size": 1, "stream": 5})
    rec.take(8, "warmup")  # no exception: the capture it describes goes on
    rec.capture_done(8)
    assert read_trace(tmp_path / "traces-per-bucket.csv.gz").incomplete == [8]


def test_a_peek_leaves_the_window_as_one_take_would_have_read_it(history, tmp_path):
    """The warm-up repeat reads the history after the first eager run; the trace must not show
    it."""

    def run(peek: bool, directory):
        history.entries, history.enabled = [], False
        rec = AllocatorRecorder(directory, "per-bucket", POOL)
        rec.start()
        history.event("alloc", (1 << 39) + 512, 1000)
        if peek:
            assert [e["addr"] for e in rec.peek()] == [(1 << 39) + 512]
            assert history.entries == []  # read and cleared, but held for the take
        history.event("free_requested", (1 << 39) + 512, 1000)
        history.event("free_completed", (1 << 39) + 512, 1000)
        history.event("alloc", (1 << 39) + 512, 3 * MIB)
        rec.take(8, "warmup")
        history.segments.append(
            {"address": SEG, "total_size": 2 * MIB, "segment_pool_id": POOL, "stream": 5}
        )
        history.event("segment_alloc", SEG, 2 * MIB)
        history.event("alloc", SEG, 4096)
        rec.capture_done(8)
        rec.stop()
        history.segments.pop()
        return (directory / "traces-per-bucket.csv.gz").read_bytes()

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert run(True, tmp_path / "a") == run(False, tmp_path / "b")
