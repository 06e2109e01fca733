"""A synthetic profile with allocator traces, for the replay tests (helpers only, no tests).

:func:`write_profile` "captures" a small transformer-like stack: every bucket's forward asks
the allocator model for the sizes such a stack asks for (hidden states, QKV, MLP activations,
small router logits, a workspace freed only after the capture), in order, and keeps or frees
its output by the mode's rule. The pool's figures in ``buckets.csv`` are what the allocator
model did; the traces record every request and where the model placed it, in the format a
GPU capture writes. So a test can capture any list "for real" (here) and compare it with the
replay of another list's profile.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bcgprof.analysis.predict.allocator import Pool
from bcgprof.report import BucketRecord, ReportWriter, RunInfo, read_report
from bcgprof.report.traces import Action, Trace, TracePhase, TracePool, TraceRow, write_trace

MIB = 1 << 20
HIDDEN, INTER, LAYERS = 1024, 1536, 3
MODES = ("per-bucket", "shared", "shared-largest", "floor")
BUCKETS = [64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]


def forward(tokens: int):
    """The forward's requests: ('a', name, bytes) and ('f', name), in order; 'out' is the output."""
    t, h = tokens, HIDDEN
    ops = [("a", "ws", t * 16), ("a", "h", t * h * 2)]
    for _layer in range(LAYERS):
        ops += [
            ("a", "x", t * h * 2),
            ("a", "qkv", t * 3 * h * 2),
            ("f", "x"),
            ("a", "rope", t * 64 * 4),
            ("f", "rope"),
            ("a", "attn", t * h * 2),
            ("f", "qkv"),
            ("a", "o", t * h * 2),
            ("f", "attn"),
            ("a", "h2", t * h * 2),
            ("f", "o"),
            ("f", "h"),
            ("r", "h2", "h"),
            ("a", "x", t * h * 2),
            ("a", "logits", t * 32 * 4),
            ("a", "up", t * 2 * INTER * 2),
            ("f", "x"),
            ("a", "act", t * INTER * 2),
            ("f", "up"),
            ("a", "down", t * h * 2),
            ("f", "act"),
            ("f", "logits"),
            ("a", "h2", t * h * 2),
            ("f", "down"),
            ("f", "h"),
            ("r", "h2", "h"),
        ]
    ops += [("a", "out", t * h * 4), ("f", "h")]  # fp32: outputs large enough to grow the pool
    return ops


def _keeps_output(mode: str, order: int) -> bool:
    return mode in ("per-bucket", "floor") or (mode == "shared-largest" and order == 0)


class _Capture:
    """One mode's process: the pool, and the trace rows as a GPU capture would write them."""

    def __init__(self, mode: str):
        self.mode = mode
        self.pool = Pool()
        self.rows: list[TraceRow] = []
        self.segments: dict[int, int] = {}  # base -> number
        self.segment_of: dict[int, int] = {}  # allocated block's address -> its segment's base
        self.next_id = 1
        self.late: list[
            tuple[int, int, int]
        ] = []  # (id, addr, bytes) freed after the capture ended

    def _free(self, bucket: int, phase: str, ident: int, addr: int, size: int) -> None:
        base = self.segment_of.pop(addr)
        self.pool.free_at(addr)
        self.rows.append(
            TraceRow(
                bucket,
                phase,
                TracePool.GRAPH,
                Action.FREE_COMPLETED,
                ident,
                size,
                0,
                self.segments[base],
                addr - base,
            )
        )

    def bucket(self, bucket: int, order: int, requests=None) -> int:
        for (
            ident,
            addr,
            size,
        ) in self.late:  # the previous capture's workspace, freed after it ended
            self._free(bucket, TracePhase.WARMUP, ident, addr, size)
        self.late = []
        self.rows.append(
            TraceRow(bucket, TracePhase.WARMUP, TracePool.OTHER, Action.PEAK, None, bucket * 100, 0)
        )
        live: dict[str, tuple[int, int, int]] = {}
        for op in (requests or forward)(bucket):
            if op[0] == "a":
                block, grew = self.pool.malloc(op[2])
                if grew:
                    self.segments[block.segment] = len(self.segments) + 1
                    self.rows.append(
                        TraceRow(
                            bucket,
                            TracePhase.CAPTURE,
                            TracePool.GRAPH,
                            Action.SEGMENT_ALLOC,
                            self.segments[block.segment],
                            self.pool.segments[block.segment],
                            0,
                            address=block.segment,
                        )
                    )
                self.segment_of[block.addr] = block.segment
                live[op[1]] = (self.next_id, block.addr, op[2])
                self.rows.append(
                    TraceRow(
                        bucket,
                        TracePhase.CAPTURE,
                        TracePool.GRAPH,
                        Action.ALLOC,
                        self.next_id,
                        op[2],
                        0,
                        self.segments[block.segment],
                        block.addr - block.segment,
                    )
                )
                self.next_id += 1
            elif op[0] == "f":
                self._free(bucket, TracePhase.CAPTURE, *live.pop(op[1]))
            else:
                live[op[2]] = live.pop(op[1])
        if not _keeps_output(self.mode, order):
            self._free(bucket, TracePhase.CAPTURE, *live.pop("out"))
        self.late.append(live.pop("ws"))
        return self.pool.reserved


def capture(mode: str, buckets: Sequence[int], requests=None) -> tuple[list[BucketRecord], Trace]:
    """One mode's rows and trace over ``buckets`` (captured largest first); ``requests``: another
    :func:`forward`."""
    order = sorted(buckets, reverse=True)
    if mode == "floor":
        order = order[:1]
    cap = _Capture(mode)
    records, before = [], 0
    for i, b in enumerate(order):
        pool = cap.bucket(b, i, requests)
        out = b * HIDDEN * 4
        outside = -(-out // (2 * MIB)) * 2 * MIB if (mode == "shared" and i == 0) else 0
        non_torch = 6 * MIB if i == 0 else (2 * MIB if i % 3 == 1 else 0)
        kept = out if (_keeps_output(mode, i) or (mode == "shared" and i == 0)) else 0
        records.append(
            BucketRecord(
                mode=mode,
                bucket=b,
                order=i,
                status="ok",
                segments=LAYERS + 1,
                graph_nodes=40 * LAYERS,
                pool_bytes=pool,
                pool_delta_bytes=pool - before,
                retained_output_bytes=kept,
                torch_reserved_delta_bytes=pool - before + outside,
                torch_allocated_delta_bytes=kept,
                device_used_delta_bytes=pool - before + outside + non_torch,
                non_torch_delta_bytes=non_torch,
                peak_transient_bytes=b * HIDDEN * 20,
                outside_pool_delta_bytes=outside,
                pool_output_bytes=kept if mode != "shared" else 0,
            )
        )
        before = pool
    trace = Trace(
        mode=mode,
        torch_version="synthetic",
        pool=(0, 1),
        settings={"max_split_size": -1},
        buckets=order,
        rows=cap.rows,
    )
    return records, trace


def write_profile(
    directory: Path,
    buckets: Sequence[int] = BUCKETS,
    modes: Sequence[str] = MODES,
    traces: bool = True,
    requests=None,
):
    """Write a complete report of ``buckets`` in ``modes`` (with traces unless ``traces`` is
    False) and read it."""
    directory = Path(directory)
    rows: list[BucketRecord] = []
    found = {}
    for mode in modes:
        records, trace = capture(mode, buckets, requests)
        rows += records
        found[mode] = trace
    run = RunInfo(
        model="synthetic",
        layers=LAYERS,
        hidden_size=HIDDEN,
        dtype="bfloat16",
        buckets=sorted(buckets),
        modes=list(modes),
        gpu_name="model of the caching allocator",
        config_hash="0123456789abcdef",
        status="complete",
    )
    ReportWriter(directory, run, rows)
    if traces:
        for trace in found.values():
            write_trace(directory, trace)
    return read_report(directory)
