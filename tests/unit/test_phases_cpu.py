"""Several phases captured by one mode's process into one pool, on the CPU with stand-ins for the
GPU parts: the phases' order, the one pool handle every capture gets, the rows' phase and order,
the replay checks keyed by phase, and the mode loop's report read back (bcgprof.measure.phases,
bcgprof.measure.mode)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

from bcgprof.measure.phases import PhasedCapturer, PhaseWork
from bcgprof.options import CaptureOptions
from bcgprof.report import BucketRecord, RunInfo

MIB = 2**20


@dataclass
class FakePool:
    """A graph pool: the bytes its segments hold. A capture grows it to what the bucket needs,
    reusing what earlier captures left free, as one pool lets the phases do."""

    bytes: int = 0


@dataclass
class FakeCapturer:
    """A Capturer's surface: records per bucket, largest first, into the pool it is given."""

    fn: Any
    inputs: list
    buckets_in: list
    options: Any = None
    mode: str = "per-bucket"
    device: Any = None
    memory: Any = None
    pool: Any = None
    log: list = field(default_factory=list)
    fail_at: Optional[int] = None
    verified: tuple = ()  # buckets whose replay check this phase runs
    made: list = field(default_factory=list)

    def __post_init__(self):
        self.buckets = sorted(self.buckets_in, reverse=True)
        if self.mode == "floor":
            self.buckets = self.buckets[:1]
        self.result = type("R", (), {"records": [], "pool_peak": None})()
        self.recorder = None
        self.prewarm_ms, self.repeated_runs, self.breaks_run, self.breaks_repeated = 1.0, 2, 3, 4
        self.sampler = type("S", (), {"samples": 5})()
        self.made.append(self)

    def run(self):
        for order, bucket in enumerate(self.buckets):
            self.log.append(("capture", self.inputs[0], bucket))
            self.pool.bytes = max(self.pool.bytes, bucket * MIB)
            status = "oom" if bucket == self.fail_at else "ok"
            record = BucketRecord(
                mode=self.mode,
                bucket=bucket,
                order=order,
                status=status,
                pool_bytes=self.pool.bytes,
            )
            self.result.records.append(record)
            yield record
            if status != "ok":
                return

    def verify(self, which=None, refill=None, seed=1):
        self.log.append(("verify", self.inputs[0], refill))
        checked = [r for r in self.result.records if r.bucket in self.verified]
        for r in checked:
            r.replay_max_abs_diff = 0.0
        return checked

    def close(self):
        self.log.append(("close", self.inputs[0]))


def _phases(log: list, lists: dict) -> list[PhaseWork]:
    return [
        PhaseWork(
            phase,
            buckets,
            [phase],  # the inputs name the phase, so the log shows whose buffers a capture used
            refill=f"{phase} refill",
            activate=lambda phase=phase: log.append(("activate", phase)),
        )
        for phase, buckets in lists.items()
    ]


def _capturer(log, lists, **fake) -> PhasedCapturer:
    pools: list = []

    def new_pool():
        pools.append(FakePool())
        return pools[-1]

    def make(fn, inputs, buckets, pool):
        log.append(("made", inputs[0]))
        return FakeCapturer(fn, inputs, buckets, pool=pool, log=log, **fake)

    capturer = PhasedCapturer(
        lambda *a: None,
        _phases(log, lists),
        make,
        new_pool,
        mode="per-bucket",
        order="largest-first",
    )
    assert len(pools) == 1  # one pool for the process
    return capturer


def test_the_phases_are_captured_in_order_into_one_pool_with_their_rows_keyed():
    log: list = []
    capturer = _capturer(log, {"prefill": [4, 8], "decode": [2, 8]})
    assert capturer.buckets == [8, 4, 8, 2]  # known before any phase begins
    rows = list(capturer.run())
    assert len(capturer.capturers) == 2
    assert all(c.pool is capturer.pool for c in capturer.capturers)
    assert [(r.phase, r.bucket, r.order) for r in rows] == [
        ("prefill", 8, 0),
        ("prefill", 4, 1),
        ("decode", 8, 2),
        ("decode", 2, 3),
    ]
    # each phase made active before its own captures, on its own buffers
    # a phase's Capturer is made only when its phase begins, after the earlier phase is done
    assert log == [
        ("activate", "prefill"),
        ("made", "prefill"),
        ("capture", "prefill", 8),
        ("capture", "prefill", 4),
        ("activate", "decode"),
        ("made", "decode"),
        ("capture", "decode", 8),
        ("capture", "decode", 2),
    ]
    # the pool the second phase captured into is the one the first left
    assert [r.pool_bytes // MIB for r in rows] == [8, 8, 8, 8]
    assert capturer.buckets == [8, 4, 8, 2] and capturer.result.records == rows


def test_a_failure_in_the_first_phase_ends_the_mode_before_the_second():
    log: list = []
    capturer = _capturer(log, {"prefill": [4, 8], "decode": [2]}, fail_at=4)
    rows = list(capturer.run())
    assert [(r.phase, r.bucket, r.status) for r in rows] == [
        ("prefill", 8, "ok"),
        ("prefill", 4, "oom"),
    ]
    assert ("activate", "decode") not in log and ("made", "decode") not in log


def test_replay_checks_run_per_phase_with_the_phase_active_and_its_own_refill():
    log: list = []
    capturer = _capturer(log, {"prefill": [8], "decode": [8]}, verified=(8,))
    list(capturer.run())
    log.clear()
    checked = capturer.verify("smallest-largest", refill="ignored", seed=3)
    assert [(r.phase, r.bucket) for r in checked] == [("prefill", 8), ("decode", 8)]
    assert log == [
        ("activate", "prefill"),
        ("verify", "prefill", "prefill refill"),
        ("activate", "decode"),
        ("verify", "decode", "decode refill"),
    ]
    capturer.recorder = "the recorder"
    assert all(c.recorder == "the recorder" for c in capturer.capturers)
    assert (capturer.prewarm_ms, capturer.repeated_runs, capturer.sampler.samples) == (2.0, 4, 10)


def test_one_phase_is_not_a_phased_capture():
    with pytest.raises(ValueError, match="two or more phases"):
        PhasedCapturer(
            lambda: None, _phases([], {"prefill": [4]}), FakeCapturer, FakePool, mode="", order=""
        )


def test_the_mode_loop_writes_a_pair_that_reads_back(tmp_path, monkeypatch):
    """run_mode with the GPU parts stood in for: one pool handle for both phases, the rows written
    with their phase and read back, a replay check landing on its own phase's row."""
    import torch

    import bcgprof.measure.capture as capture_module
    import bcgprof.measure.memory as memory_module
    import bcgprof.measure.phases as phases_module
    import bcgprof.measure.tracing as tracing_module
    from bcgprof.measure.mode import SingleGroup, run_mode
    from bcgprof.measure.workload import Workload
    from bcgprof.report import read_report
    from bcgprof.report.write import ReportWriter

    log: list = []
    made: list = []
    lists = {"prefill": [4, 8], "decode": [2, 8]}

    class Capturer(FakeCapturer):
        def __init__(self, fn, inputs, buckets, **kw):
            verified = (8,) if inputs[0] == "decode" else ()
            super().__init__(fn, inputs, buckets, log=log, made=made, verified=verified, **kw)

    class Memory:
        source, reason = "stand-in", ""

        def __init__(self, device):
            pass

    class Recorder:
        started = False

        def __init__(self, report_dir, mode, pool, **kw):
            log.append(("recorder", report_dir, pool))

        def start(self):
            self.started = True

        def stop(self):
            pass

        def take_warning(self):
            return None

    def build_phased(spec, opts, device):
        work = Workload(fn=None, inputs=[], refill=None, build_s=0.0, parameter_bytes=1)
        return work, _phases(log, lists)

    pools: list = []
    monkeypatch.setattr(capture_module, "Capturer", Capturer)
    monkeypatch.setattr(memory_module, "DeviceMemory", Memory)
    monkeypatch.setattr(tracing_module, "AllocatorRecorder", Recorder)
    monkeypatch.setattr(phases_module, "build_phased", build_phased)
    monkeypatch.setattr(
        torch.cuda, "graph_pool_handle", lambda: pools.append(FakePool()) or pools[-1]
    )

    opts = CaptureOptions(
        model="Llama-3.1-8B",
        phase="prefill",
        phases=["prefill", "decode"],
        phase_buckets={"prefill": "4,8", "decode": "2,8"},
        modes=["per-bucket"],
        device="cpu",
    )
    run = RunInfo(
        model="Llama-3.1-8B",
        config_hash="5d1b7c0e2a9f4e61",
        schema_version=2,
        phase="prefill",
        phases=["prefill", "decode"],
        phase_buckets=lists,
        buckets=[2, 4, 8],
        modes=["per-bucket"],
    )
    ReportWriter(tmp_path / "pair", run)
    events: list = []
    code = run_mode(
        opts, "per-bucket", tmp_path / "pair", events.append, SingleGroup(torch.device("cpu"))
    )
    assert code == 0, events
    assert len(pools) == 1 and all(c.pool is pools[0] for c in made) and len(made) == 2
    # no trace file: its buckets would not tell the phases apart
    assert ("recorder", None, pools[0]) in log
    report = read_report(tmp_path / "pair", phased=True)
    rows = [(r.phase, r.bucket, r.order, r.replay_max_abs_diff) for r in report.buckets]
    assert rows == [
        ("prefill", 8, 0, None),
        ("prefill", 4, 1, None),
        ("decode", 8, 2, 0.0),  # the decode phase's check, not the prefill row of the same size
        ("decode", 2, 3, None),
    ]
    assert [e["bucket"] for e in events if e["event"] == "bucket"] == [8, 4, 8, 2]


def test_a_run_of_several_phases_fills_each_phase_s_list_and_counts_every_capture():
    from bcgprof.buckets import sglang_decode_buckets
    from bcgprof.errors import CaptureError
    from bcgprof.measure.phases import capture_total, decode_part, prepare_phased

    opts = CaptureOptions(
        phases=["prefill", "decode"],
        phase_buckets={"prefill": "16,8"},
        modes=["per-bucket", "floor"],
        max_bs=16,
    )
    prepared, union = prepare_phased(opts)
    assert prepared.phase == "prefill" and prepared.buckets is None
    assert prepared.phase_buckets == {"prefill": "16,8", "decode": "sglang-decode"}
    decode = sglang_decode_buckets(16)
    assert union == sorted({8, 16, *decode})
    # per-bucket captures every bucket of both phases, the floor each phase's largest
    assert capture_total(prepared, union) == 2 + len(decode) + 2
    decode_opts, decode_buckets = decode_part(prepared, union)
    assert (decode_opts.phase, decode_opts.phases, decode_buckets) == ("decode", [], decode)
    with pytest.raises(CaptureError, match="use --tp 1"):
        prepare_phased(CaptureOptions(phases=["prefill", "decode"], tp=2))
