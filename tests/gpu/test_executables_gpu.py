"""Segments sharing graph executables (``--executables per-signature``) on a GPU: signatures read
through the CUDA driver, replays equal to the eager forward, fewer executables and less device
memory than one executable per segment. Needs CUDA and the CUDA Python bindings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bcgprof.measure.capture import capture_buckets

from .toy import ToyBreakModel

pytestmark = pytest.mark.gpu

BUCKETS = [8, 64, 256, 1024]


@pytest.fixture(autouse=True)
def _bindings():
    pytest.importorskip("cuda.bindings", reason="shared executables read graphs with cuda.bindings")


def _toy(layers=8, side_streams=False):
    torch.manual_seed(0)
    model = ToyBreakModel(layers=layers, side_streams=side_streams).cuda().to(torch.bfloat16).eval()
    model.requires_grad_(False)
    ids = torch.randint(0, 97, (max(BUCKETS),), device="cuda")
    pos = torch.arange(max(BUCKETS), device="cuda")
    return model, [ids, pos]


def _kept_graph(fn, stream):
    """``fn``'s work as a kept (never instantiated) CUDA graph, captured on ``stream``."""
    with torch.cuda.stream(stream):
        fn()  # warm-up: kernels loaded before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph, stream=stream):
        out = fn()
    return graph, out


def test_the_driver_reads_graphs_that_differ_only_in_addresses_as_one_signature():
    from bcgprof.bcg.driver import describe_graph
    from bcgprof.bcg.signature import graph_signature

    stream = torch.cuda.Stream()
    x, y, z = (torch.randn(rows, 64, device="cuda") for rows in (256, 256, 4096))
    graphs = [_kept_graph(lambda t=t: torch.relu(t).sum(0), stream) for t in (x, y, z)]
    described = [describe_graph(int(g.raw_cuda_graph())) for g, _ in graphs]
    sigs = [graph_signature(*d) for d in described]
    assert sigs[0] == sigs[1]  # other tensors, same shapes: addresses only
    assert sigs[0] != sigs[2]  # another row count: another grid
    nodes, edges = described[0]
    kernels = [payload for kind, payload in nodes if kind == "kernel"]
    assert len(kernels) >= 2 and edges  # relu, then the sum, which depends on it
    assert all(payload[0] != 0 for payload in kernels)  # every kernel's function handle was read


@pytest.mark.parametrize("side_streams", [False, True])
def test_shared_executables_replay_equal_to_eager(side_streams):
    model, inputs = _toy(side_streams=side_streams)
    result = capture_buckets(
        model, inputs, BUCKETS, mode="per-bucket", verify="all", executables="per-signature"
    )
    share = result.executables
    assert share is not None and share.refused == 0
    for r in result.records:
        assert r.status == "ok", r.detail
        assert r.segments == model.breaks + 1
        assert r.replay_max_abs_diff == 0.0
        # before the first break, between two (every layer alike), after the last
        assert r.executables <= r.signatures <= 3 < r.segments
    assert share.executables == sum(r.executables for r in result.records)
    assert share.executables < sum(r.segments for r in result.records)
    assert share.updates > 0  # the replays moved shared executables from segment to segment


def test_a_replay_follows_the_current_inputs_after_other_buckets_ran():
    model, inputs = _toy()
    result = capture_buckets(model, inputs, BUCKETS, verify="none", executables="per-signature")
    for bucket in (64, 1024, 64):  # another bucket's replay in between leaves no trace
        inputs[0].random_(0, 97)
        replayed = result.replay(bucket).clone()
        with torch.no_grad():
            eager = model(inputs[0][:bucket], inputs[1][:bucket])
        assert torch.equal(replayed, eager)


def test_per_segment_stays_one_executable_per_segment():
    model, inputs = _toy()
    result = capture_buckets(model, inputs, BUCKETS, verify="all")
    assert result.executables is None
    for r in result.records:
        assert r.executables == r.segments and r.signatures is None
        assert r.replay_max_abs_diff == 0.0


def test_a_full_graph_shares_across_buckets_only_where_signatures_meet():
    model, inputs = _toy()
    result = capture_buckets(
        model, inputs, BUCKETS, graph="full", verify="all", executables="per-signature"
    )
    for r in result.records:
        assert r.status == "ok", r.detail
        assert r.segments == 1 and r.signatures == 1 and r.executables <= 1
        assert r.replay_max_abs_diff == 0.0


def test_sharing_takes_less_device_memory_than_one_executable_per_segment():
    model, inputs = _toy(layers=32)
    buckets = [8, 16, 32, 64, 128, 256, 512, 1024]
    # Shared first, and both kept alive: the second capture cannot reuse memory the first freed, and
    # what a first capture pays once (library workspaces) is charged to the shared one.
    shared = capture_buckets(model, inputs, buckets, verify="none", executables="per-signature")
    each = capture_buckets(model, inputs, buckets, verify="none")

    def outside_torch(result):
        return sum(r.non_torch_delta_bytes for r in result.records)

    for name, result in (("per-signature", shared), ("per-segment", each)):
        failed = [(r.bucket, r.status, r.detail) for r in result.records if r.status != "ok"]
        assert not failed, (name, failed)  # a bucket that failed has no executables to count
    assert sum(r.executables for r in shared.records) < sum(r.executables for r in each.records)
    assert outside_torch(shared) < outside_torch(each)


# ---------------------------------------------------------------- a tiny gpt-oss, end to end


def _tiny(tmp_path):
    config = json.loads(Path("configs/models/gpt-oss-20b.json").read_text())
    config.update(
        hidden_size=512,
        intermediate_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        num_local_experts=8,
        vocab_size=1024,
        layer_types=["sliding_attention", "full_attention"] * 4,
    )
    (tmp_path / "tiny").mkdir(exist_ok=True)
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(config))
    return str(tmp_path / "tiny")


def test_a_capture_with_shared_executables_writes_them_and_costs_less(tmp_path):
    from bcgprof.measure.runner import run_capture
    from bcgprof.options import CaptureOptions
    from bcgprof.report import read_report

    reports = {}
    for choice in ("per-segment", "per-signature"):  # each mode in a fresh process: a fair match
        opts = CaptureOptions(
            model=_tiny(tmp_path),
            buckets="32,64,128,256,512,1024",
            modes=["per-bucket"],
            out=tmp_path / choice,
            max_tokens=1024,
            verify="all",
            executables=choice,
        )
        assert run_capture(opts).exit_code == 0
        reports[choice] = read_report(tmp_path / choice)
    each, shared = reports["per-segment"], reports["per-signature"]
    assert (each.run.executables, shared.run.executables) == ("per-segment", "per-signature")
    # Triton's kernels and cuBLAS's alike
    assert all(r.replay_max_abs_diff == 0.0 for r in shared.buckets)
    assert [r.segments for r in shared.buckets] == [r.segments for r in each.buckets]
    assert all(r.executables == r.segments and r.signatures is None for r in each.buckets)
    assert all(r.signatures is not None and r.signatures < r.segments for r in shared.buckets)
    assert sum(r.executables for r in shared.buckets) < sum(r.executables for r in each.buckets)
    used = {
        k: next(s.device_used_bytes for s in rep.summary if s.mode == "per-bucket")
        for k, rep in reports.items()
    }
    assert used["per-signature"] < used["per-segment"]
    # the pool as it was
    assert [r.pool_bytes for r in shared.buckets] == [r.pool_bytes for r in each.buckets]
