"""Two phases captured into one graph pool on a tiny gpt-oss, as SGLang captures prefill and then
decode into its one pool per process: every phase's Capturer holds the one pool handle, every
graph segment the pair leaves lies in that pool, each phase's replays equal eager forwards; and
`capture --phase prefill,decode`'s runs write the pair (schema 2) and each phase alone, whose rows
round-trip with their phase and which show sets against each other. Needs CUDA."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch

from bcgprof.measure.capture import Capturer
from bcgprof.measure.phases import PhasedCapturer, PhaseWork
from bcgprof.measure.workload import build_phase_workloads
from bcgprof.options import CaptureOptions
from bcgprof.spec import resolve_model

pytestmark = pytest.mark.gpu

PREFILL = [16, 32, 64]
DECODE = [2, 8, 16]  # 16 tokens and 16 sequences: one size in both phases


def _tiny(tmp_path: Path) -> str:
    config = json.loads(Path("configs/models/gpt-oss-20b.json").read_text())
    config.update(
        hidden_size=256,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=512,
        num_local_experts=4,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=16,
    )
    path = tmp_path / "tiny"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def _pool_ids() -> set:
    """The graph pools that hold segments now (the ordinary allocator's are (0, 0))."""
    ids = {tuple(s.get("segment_pool_id", (0, 0))) for s in torch.cuda.memory_snapshot()}
    return ids - {(0, 0)}


def test_two_phases_share_one_pool_and_replay_as_eager(tmp_path):
    device = torch.device("cuda")
    works = build_phase_workloads(
        resolve_model(_tiny(tmp_path)),
        ["prefill", "decode"],
        weights="dummy",
        num_layers=None,
        device=device,
        max_tokens=max(PREFILL),
        seed=0,
        max_bs=max(DECODE),
        context_len=64,
    )
    phases = [
        PhaseWork(p, b, w.inputs, w.refill, w.activate)
        for p, b, w in zip(["prefill", "decode"], [PREFILL, DECODE], works)
    ]
    made = partial(Capturer, options=CaptureOptions(warmup=1), mode="per-bucket", device=device)
    capturer = PhasedCapturer(
        works[0].fn,
        phases,
        made,
        torch.cuda.graph_pool_handle,
        mode="per-bucket",
        order="largest-first",
    )
    before = _pool_ids()  # pools an earlier test may have left
    rows = list(capturer.run())
    try:
        assert [(r.phase, r.bucket, r.order, r.status) for r in rows] == [
            ("prefill", 64, 0, "ok"),
            ("prefill", 32, 1, "ok"),
            ("prefill", 16, 2, "ok"),
            ("decode", 16, 3, "ok"),
            ("decode", 8, 4, "ok"),
            ("decode", 2, 5, "ok"),
        ]
        assert [c.pool for c in capturer.capturers] == [capturer.pool] * 2
        # every graph segment the pair made lies in the one pool
        assert _pool_ids() - before == {tuple(capturer.pool)}
        pools = [r.pool_bytes for r in rows]
        assert pools == sorted(pools)  # one pool: the second phase starts where the first ended
        checked = capturer.verify("all", seed=1)
        assert {(r.phase, r.bucket) for r in checked} == {(r.phase, r.bucket) for r in rows}
        assert all(r.replay_max_abs_diff == 0.0 and r.status == "ok" for r in checked)
    finally:
        capturer.close()


def test_the_capture_runs_write_the_pair_and_each_phase_alone(tmp_path):
    from bcgprof.analysis.phases import pools_of
    from bcgprof.cli.phase_options import phase_runs
    from bcgprof.measure.runner import run_capture
    from bcgprof.report import read_report

    opts = CaptureOptions(
        model=_tiny(tmp_path),
        phase="prefill",
        phases=["prefill", "decode"],
        phase_buckets={"prefill": ",".join(map(str, PREFILL)), "decode": "2,8,16"},
        modes=["per-bucket", "shared", "floor"],
        max_bs=max(DECODE),
        context_len=64,
        verify="all",
    )
    out = tmp_path / "pair"
    for run in phase_runs(opts, out):  # each phase alone, then the pair
        assert run_capture(run).exit_code == 0
    report = read_report(out, phased=True)
    assert report.run.schema_version == 2 and report.run.phases == ["prefill", "decode"]
    assert report.run.phase_buckets == {"prefill": PREFILL, "decode": DECODE}
    per_bucket = [r for r in report.buckets if r.mode == "per-bucket"]
    assert [(r.phase, r.bucket) for r in per_bucket] == [
        ("prefill", 64),
        ("prefill", 32),
        ("prefill", 16),
        ("decode", 16),
        ("decode", 8),
        ("decode", 2),
    ]
    assert all(r.replay_max_abs_diff == 0.0 for r in per_bucket)
    assert "traces-per-bucket.csv.gz" not in {p.name for p in out.iterdir()}
    for phase in ("prefill", "decode"):
        alone = read_report(out / f"phase-{phase}")
        assert alone.run.schema_version == 1 and alone.run.phase == phase
        assert {r.phase for r in alone.buckets} == {""}
    for pool in pools_of(report) or []:
        assert pool.complete and pool.pair_bytes is not None
        assert pool.beyond_larger_bytes is not None and pool.larger_alone_bytes is not None
        # the pair holds at least what the larger phase alone held, give or take the layout
        print(pool.to_json())
