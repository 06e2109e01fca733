"""Tensor-parallel capture on 2 GPUs: a tiny gpt-oss through `run_capture(tp=2)`.

Skipped unless at least 2 CUDA devices are visible. Each mode starts 2 rank processes
(NCCL, multicast off); the all-reduces are captured inside the graph segments.
"""

import json
from pathlib import Path

import pytest
import torch

from bcgprof.measure.runner import run_capture
from bcgprof.options import CaptureOptions
from bcgprof.report import read_report

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
]


def _tiny_gpt_oss(path, **changes):
    config = json.loads(Path("configs/models/gpt-oss-20b.json").read_text())
    config.update(
        hidden_size=256,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_local_experts=4,
        vocab_size=512,
        layer_types=["sliding_attention", "full_attention"],
    )
    config.update(changes)
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_tp2_capture_writes_both_ranks_and_replays_exactly(tmp_path):
    model = _tiny_gpt_oss(tmp_path / "tiny")
    opts = CaptureOptions(
        model=str(model),
        buckets="16,64,256",
        out=tmp_path / "report",
        tp=2,
        verify="all",
        max_tokens=256,
    )
    assert run_capture(opts).exit_code == 0
    report = read_report(tmp_path / "report")
    assert report.run.tp == 2 and report.run.status == "complete"
    assert report.run.extra["tp_environment"]["NCCL_NVLS_ENABLE"] == "0"
    for mode in ("per-bucket", "shared", "floor"):
        ranks = {r.rank for r in report.buckets if r.mode == mode}
        assert ranks == {0, 1}, mode
        summary = {s.rank for s in report.summary if s.mode == mode}
        assert {"0", "1", "max", "sum"} <= summary
    assert all(r.status == "ok" for r in report.buckets)
    assert all(r.replay_max_abs_diff == 0.0 for r in report.buckets), [
        (r.mode, r.rank, r.bucket, r.replay_max_abs_diff) for r in report.buckets
    ]
    # a bucket's output is the full hidden state on every rank (after the all-reduce)
    for r in report.buckets:
        if r.mode == "per-bucket":
            assert r.retained_output_bytes >= r.bucket * 256 * 2


def test_tp2_with_one_kv_head_replicated(tmp_path):
    model = _tiny_gpt_oss(tmp_path / "tiny", num_key_value_heads=1)
    opts = CaptureOptions(
        model=str(model),
        buckets="16,64",
        out=tmp_path / "report",
        tp=2,
        modes=["per-bucket"],
        verify="all",
        max_tokens=64,
    )
    assert run_capture(opts).exit_code == 0
    report = read_report(tmp_path / "report")
    assert {(r.rank, r.bucket) for r in report.buckets} == {(0, 16), (0, 64), (1, 16), (1, 64)}
    assert all(r.replay_max_abs_diff == 0.0 for r in report.buckets)
