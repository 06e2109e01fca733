"""The tensor-parallel launcher and rank loop on the CPU: set-up checks, the ranks'
environment, and the lockstep rank loop (gloo, world size 2) with a stand-in capturer,
so the report merging, the collective stop and the replay-check exchange run for real.
"""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bcgprof.errors import CaptureError, ModelConfigError, NoGPUError
from bcgprof.measure import dist as tpdist
from bcgprof.measure import mode as mode_loop
from bcgprof.measure.runner import run_capture
from bcgprof.measure.sites import PoolPeak, SiteBytes
from bcgprof.options import CaptureOptions
from bcgprof.report import BucketRecord, ReportWriter, RunInfo, read_report
from bcgprof.spec import resolve_model

WORLD = 2
BUCKETS = [4, 2, 1]

# ---------------------------------------------------------------- set-up checks


def test_multicast_stays_off_in_the_environment_of_every_rank():
    expected = {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }
    assert tpdist.tp_environment() == expected
    base = {"PATH": "/bin", "NCCL_NVLS_ENABLE": "1"}  # a user's setting does not turn it back on
    env = tpdist.rank_environment(1, 4, 29500, base=base)
    assert {k: env[k] for k in expected} == expected
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("1", "1", "4")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["PATH"]) == ("127.0.0.1", "29500", "/bin")
    assert base["NCCL_NVLS_ENABLE"] == "1"  # the base mapping is not modified
    mine = tpdist.apply_tp_environment({})
    assert mine == expected


def test_under_torchrun():
    assert tpdist.under_torchrun({"RANK": "0", "WORLD_SIZE": "2"})
    assert not tpdist.under_torchrun({"PATH": "/bin"})


def test_free_port():
    assert 0 < tpdist.free_port() < 65536


@pytest.mark.parametrize(
    "tp, gpus, nccl, error, message",
    [
        (0, 8, True, CaptureError, "--tp must be a positive number of GPUs, got 0"),
        (
            4,
            1,
            True,
            CaptureError,
            "asked for --tp 4 but this machine has 1 GPU; pass --tp 1 or less",
        ),
        (4, 2, True, CaptureError, "asked for --tp 4 but this machine has 2 GPUs"),
        (2, 0, True, NoGPUError, "asked for --tp 2 but no CUDA device was found"),
        (2, 2, False, CaptureError, "NCCL is not available in this torch build"),
        (
            3,
            4,
            True,
            ModelConfigError,
            "gpt-oss-120b: cannot split the gpt_oss stack over 3 tensor-parallel ranks: "
            "num_attention_heads 64 is not divisible by 3",
        ),
    ],
)
def test_bad_setups_fail_in_one_line(tp, gpus, nccl, error, message):
    spec = resolve_model("gpt-oss-120b")
    with pytest.raises(error) as info:
        tpdist.check_tp_setup(spec, tp, gpus, nccl)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_good_setups_pass(tp):
    tpdist.check_tp_setup(resolve_model("gpt-oss-120b"), tp, 8, True)


def test_capture_tp_without_gpus_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    opts = CaptureOptions(model="gpt-oss-120b", tp=2, out=tmp_path / "r", buckets="1,2")
    with pytest.raises(NoGPUError, match="asked for --tp 2 but no CUDA device was found"):
        run_capture(opts)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(CaptureError, match="asked for --tp 2 but this machine has 1 GPU"):
        run_capture(opts)
    assert not (tmp_path / "r").exists()
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"  # set in this process before anything starts


def test_capture_tp_rejects_a_device_and_in_process(tmp_path):
    with pytest.raises(CaptureError, match="CUDA_VISIBLE_DEVICES"):
        run_capture(CaptureOptions(model="gpt-oss-120b", tp=2, device="cuda:1", buckets="1"))
    with pytest.raises(CaptureError, match="torchrun --nproc-per-node 2"):
        run_capture(CaptureOptions(model="gpt-oss-120b", tp=2, in_process=True, buckets="1"))


def test_cli_capture_tp_on_a_cpu_machine_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from bcgprof.cli import app

    result = CliRunner().invoke(
        app,
        [
            "capture",
            "--model",
            "gpt-oss-120b",
            "--tp",
            "2",
            "--buckets",
            "1,2",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code != 0
    lines = [ln for ln in result.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "--tp 2" in lines[0], result.output


# ---------------------------------------------------------------- the rank loop, with a stand-in
# capturer


class FakeCapturer:
    """Yields one ok record per bucket; fails (rank, bucket) pairs listed in FAIL."""

    FAIL: ClassVar[set[tuple[int, int]]] = set()

    def __init__(self, fn, inputs, buckets, *, mode, rank, **kwargs):
        self.mode, self.rank = mode, rank
        self.buckets = (
            sorted(buckets, reverse=True)[:1] if mode == "floor" else sorted(buckets, reverse=True)
        )
        # a pool peak as a floor capture records it (here in every mode, to see rank 0 write both
        # ranks')
        peak = PoolPeak(
            pool_bytes=1000 * (rank + 1),
            peak_live_bytes=600,
            slack_bytes=1000 * (rank + 1) - 600,
            sites=[SiteBytes("layers.N.mlp: act", 400, 2), SiteBytes("model: forward", 200, 1)],
        )
        self.result = SimpleNamespace(records=[], pool_peak=peak if mode == "per-bucket" else None)
        self.prewarm_ms = 0.0
        self.repeated_runs = 0
        self.breaks_run = self.breaks_repeated = 0
        self.sampler = SimpleNamespace(samples=0)

    def run(self):
        for order, bucket in enumerate(self.buckets):
            failed = (self.rank, bucket) in self.FAIL
            rec = BucketRecord(
                mode=self.mode,
                bucket=bucket,
                order=order,
                status="oom" if failed else "ok",
                rank=self.rank,
                pool_bytes=(order + 1) * (self.rank + 1) * 1000,
                device_used_delta_bytes=bucket * (self.rank + 1) * 100,
                non_torch_delta_bytes=bucket * (self.rank + 1) * 100,
                detail="out of memory" if failed else "",
            )
            self.result.records.append(rec)
            yield rec
            if failed:
                return

    def verify(self, which, refill=None, seed=0):
        checked = [
            r for r in self.result.records if r.bucket in (max(self.buckets), min(self.buckets))
        ]
        for r in checked:
            r.replay_max_abs_diff = 0.0
        return checked

    def close(self):
        pass


def _fake_workload(spec, *, tp_rank, **kwargs):
    if os.environ.get("BCGPROF_TEST_FAIL_BUILD") == str(tp_rank):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return SimpleNamespace(
        fn=None,
        inputs=[],
        refill=None,
        build_s=0.1,
        parameter_bytes=10 * (tp_rank + 1),
        kv_cache_bytes=0,
    )


def _rank_loop(rank: int, world: int, init_file: str, out: str, results: str) -> None:
    import bcgprof.measure.capture
    import bcgprof.measure.device
    import bcgprof.measure.workload

    torch.set_num_threads(1)
    bcgprof.measure.capture.Capturer = FakeCapturer
    bcgprof.measure.workload.build_workload = _fake_workload
    bcgprof.measure.device.DeviceMemory = lambda device: SimpleNamespace(source="fake", reason=None)
    FakeCapturer.FAIL = {(1, 2)}  # rank 1 runs out of memory on bucket 2 of the shared mode
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    group = tpdist.RankGroup(rank, world, torch.device("cpu"), dist.new_group(backend="gloo"))
    opts = CaptureOptions(model="gpt-oss-20b", buckets=",".join(map(str, BUCKETS)), tp=world)
    codes, events = {}, []
    try:
        for mode in ("per-bucket", "shared", "floor"):
            if mode == "shared":
                FakeCapturer.FAIL = {(1, 2)}
            else:
                FakeCapturer.FAIL = set()
            if mode == "floor":
                os.environ["BCGPROF_TEST_FAIL_BUILD"] = "1"
            codes[mode] = mode_loop.run_mode(opts, mode, Path(out), events.append, group)
    finally:
        dist.destroy_process_group()
    Path(results, f"rank{rank}.json").write_text(json.dumps({"codes": codes, "events": events}))


def _lockstep_rank(rank: int, world: int, init_file: str, results: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        mine = [
            SimpleNamespace(status="ok", bucket=b, rank=rank) for b in range(3 if rank == 0 else 5)
        ]
        group = tpdist.RankGroup(rank, world, torch.device("cpu"), None)
        steps = [[(r.rank, r.bucket) for r in rows] for rows in mode_loop.lockstep(mine, group)]
        Path(results, f"lock{rank}.json").write_text(json.dumps(steps))
    finally:
        dist.destroy_process_group()


def _ranks(rank: int, world: int, folder: str) -> None:
    """One spawn of the ranks for both tests below, each part in a process group of its own: the
    lockstep alone, then the rank loop. A part that fails leaves its traceback for its test."""
    for part, run in (
        ("lock", lambda: _lockstep_rank(rank, world, f"{folder}/init-lock", folder)),
        ("rank", lambda: _rank_loop(rank, world, f"{folder}/init", f"{folder}/report", folder)),
    ):
        try:
            run()
        except BaseException:
            Path(folder, f"{part}{rank}.failed").write_text(traceback.format_exc())
            raise


@pytest.fixture(scope="module")
def ranks_ran(tmp_path_factory) -> Path:
    """The folder of the ranks' results (one spawn for the module's two gloo tests)."""
    folder = tmp_path_factory.mktemp("ranks")
    ReportWriter(
        folder / "report",
        RunInfo(
            model="gpt-oss-20b",
            config_hash="348b8e61e22f5315",
            buckets=BUCKETS,
            modes=["per-bucket", "shared", "floor"],
            tp=2,
        ),
    )
    try:
        mp.spawn(_ranks, args=(WORLD, str(folder)), nprocs=WORLD, join=True)
    except Exception as e:  # the tests read what each part left, or why it left nothing
        (folder / "spawn.failed").write_text(str(e))
    return folder


def _results(folder: Path, part: str) -> list:
    """Each rank's results of ``part``; a test fails with the tracebacks its part left, or with
    every failure when its part left no result."""
    failed = [f.read_text() for f in sorted(folder.glob(f"{part}*.failed"))]
    assert not failed, "\n".join(failed)
    files = [folder / f"{part}{r}.json" for r in range(WORLD)]
    missing = [f.name for f in files if not f.exists()]
    everything = [f"{f.name}: {f.read_text()}" for f in sorted(folder.glob("*.failed"))]
    assert not missing, f"no {missing}: " + "\n".join(everything)
    return [json.loads(f.read_text()) for f in files]


def test_ranks_capture_in_lockstep_and_rank0_writes_every_rank(ranks_ran):
    out = ranks_ran / "report"
    results = _results(ranks_ran, "rank")

    # the same decision on both ranks: ok, out of memory in shared, the floor's build failed on rank
    # 1
    for res in results:
        assert res["codes"] == {"per-bucket": 0, "shared": 3, "floor": 3}

    report = read_report(out)
    rows = {(r.mode, r.rank, r.bucket): r for r in report.buckets}
    assert sorted(k for k in rows if k[0] == "per-bucket") == [
        ("per-bucket", rk, b) for rk in (0, 1) for b in (1, 2, 4)
    ]
    # replay checks of both ranks land in the report rank 0 wrote
    assert [
        rows[("per-bucket", rk, b)].replay_max_abs_diff for rk in (0, 1) for b in (1, 2, 4)
    ] == [0.0, None, 0.0, 0.0, None, 0.0]
    # shared: both ranks stop after the bucket rank 1 failed; nothing captured for bucket 1
    assert sorted(k[1:] for k in rows if k[0] == "shared") == [(0, 2), (0, 4), (1, 2), (1, 4)]
    assert rows[("shared", 1, 2)].status == "oom" and rows[("shared", 0, 2)].status == "ok"
    assert not any(k[0] == "floor" for k in rows)
    # summary: per rank, plus the largest rank and the sum
    pb = {s.rank: s for s in report.summary if s.mode == "per-bucket"}
    assert set(pb) == {"0", "1", "max", "sum"}
    assert pb["max"].device_used_bytes == pb["1"].device_used_bytes == 2 * 700
    assert pb["sum"].device_used_bytes == 700 + 1400
    # the pool peaks of both ranks, sites then slack, summing to each rank's pool bytes
    sites = [(s.rank, s.kind, s.site, s.bytes) for s in report.sites]
    assert sites == [
        (0, "site", "layers.N.mlp: act", 400),
        (0, "site", "model: forward", 200),
        (0, "slack", "pool bytes not live at the peak (allocator slack)", 400),
        (1, "site", "layers.N.mlp: act", 400),
        (1, "site", "model: forward", 200),
        (1, "slack", "pool bytes not live at the peak (allocator slack)", 1400),
    ]
    assert {s.bucket for s in report.sites} == {4} and {s.mode for s in report.sites} == {
        "per-bucket"
    }
    # timings of every rank in run.json
    assert [t["parameter_bytes"] for t in report.run.extra["modes"]["per-bucket"]["ranks"]] == [
        10,
        20,
    ]

    # rank 0 speaks for the group: one progress event per bucket step, naming the failing rank
    ev0 = results[0]["events"]
    shared = [e for e in ev0 if e["event"] == "bucket" and e["mode"] == "shared"]
    assert [(e["bucket"], e["status"]) for e in shared] == [(4, "ok"), (2, "oom")]
    assert shared[1]["detail"] == "rank 1: out of memory"
    floor_error = [e for e in ev0 if e["event"] == "error" and e["mode"] == "floor"]
    assert floor_error and floor_error[0]["message"].startswith(
        "rank 1: RuntimeError: CUDA out of memory"
    )


def test_lockstep_stops_every_rank_when_one_runs_out_of_records(ranks_ran):
    steps = _results(ranks_ran, "lock")
    assert steps[0] == steps[1]
    assert steps[0][:3] == [[[0, b], [1, b]] for b in range(3)]
    assert steps[0][3] == [[1, 3]]  # the step in which rank 0 had nothing left is the last
    assert len(steps[0]) == 4
