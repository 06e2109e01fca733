"""Decode capture over a KV cache on a tiny gpt-oss and Llama: replay equals an eager decode
step bit for bit (breakable and full graphs), the capture touches no cache slot beyond the
ones its step writes, and each bucket retains batch x hidden x dtype bytes. Needs CUDA."""

import json
from pathlib import Path

import pytest
import torch

from bcgprof.measure.capture import Capturer, capture_buckets
from bcgprof.measure.workload import build_workload
from bcgprof.options import CaptureOptions
from bcgprof.spec import resolve_model

pytestmark = pytest.mark.gpu

BUCKETS = [1, 2, 8, 16]


def _tiny(tmp_path, preset="gpt-oss-20b", **changes):
    config = json.loads(Path(f"configs/models/{preset}.json").read_text())
    config.update(
        hidden_size=256,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=512,
    )
    if preset.startswith("gpt-oss"):
        config.update(
            num_local_experts=4,
            layer_types=["sliding_attention", "full_attention"],
            sliding_window=16,
        )
    config.update(changes)
    path = tmp_path / preset
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return resolve_model(str(path))


def _workload(tmp_path, preset="gpt-oss-20b", context=64):
    spec = _tiny(tmp_path, preset)
    return build_workload(
        spec,
        weights="dummy",
        num_layers=None,
        device=torch.device("cuda"),
        max_tokens=16,
        seed=0,
        phase="decode",
        max_bs=max(BUCKETS),
        context_len=context,
    )


@pytest.mark.parametrize("preset", ["gpt-oss-20b", "Llama-3.1-8B"])
@pytest.mark.parametrize("graph", ["breakable", "full"])
def test_decode_replay_equals_eager_bit_for_bit(tmp_path, preset, graph):
    w = _workload(tmp_path, preset)
    result = capture_buckets(
        w.fn, w.inputs, BUCKETS, mode="per-bucket", graph=graph, verify="all", refill=w.refill
    )
    hidden = w.fn.hidden_size
    for r in result.records:
        assert r.status == "ok", r.detail
        assert r.replay_max_abs_diff == 0.0
        assert r.retained_output_bytes == r.bucket * hidden * 2
        assert r.segments == (1 if graph == "full" else len(w.fn.layers) + 1)


def test_capture_touches_only_the_slots_its_step_writes(tmp_path):
    w = _workload(tmp_path)
    cache = [a.self_attn.kv_cache for a in w.fn.layers]
    before = [(k.clone(), v.clone()) for k, v in cache]
    capturer = Capturer(
        w.fn, w.inputs, BUCKETS, CaptureOptions(warmup=1), mode="shared", prewarm=False
    )
    try:
        records = list(capturer.run())
    finally:
        capturer.close()
    assert all(r.status == "ok" for r in records)
    positions = w.inputs[1]
    written = torch.zeros(max(BUCKETS), before[0][0].shape[2], dtype=torch.bool, device="cuda")
    written[torch.arange(max(BUCKETS), device="cuda"), positions[: max(BUCKETS)]] = True
    for (k0, v0), (k1, v1) in zip(before, cache):
        changed = ((k1 != k0).any(dim=(1, 3))) | ((v1 != v0).any(dim=(1, 3)))  # [seqs, context]
        assert not (changed & ~written).any()


def test_the_cache_is_outside_the_pool_and_charged_to_no_bucket(tmp_path):
    w = _workload(tmp_path)
    # layers x K,V x seqs x Hkv x ctx x D x bf16
    assert w.kv_cache_bytes == 2 * 2 * max(BUCKETS) * 2 * 64 * 64 * 2
    result = capture_buckets(w.fn, w.inputs, BUCKETS, mode="floor", verify="none")
    assert result.records[0].pool_bytes < (64 << 20)  # a tiny decode step; the cache is not in it
    from bcgprof.measure.memory import storage_in_pool

    k, _ = w.fn.layers[0].self_attn.kv_cache
    assert not storage_in_pool(k, result.pool)


def test_replay_waits_for_a_refill_still_running_on_the_current_stream(tmp_path):
    """A refill of a large cache queued on the current stream must land before the replay reads
    it."""
    w = _workload(tmp_path, context=4096)
    result = capture_buckets(w.fn, w.inputs, [16], mode="per-bucket", verify="none")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    for _ in range(3):
        w.refill(w.inputs, gen)  # queued, not waited for
        replayed = result.replay(16).clone()
        with torch.no_grad():
            eager = w.fn(*[x[:16] for x in w.inputs])
        torch.cuda.synchronize()
        assert torch.equal(replayed, eager)
