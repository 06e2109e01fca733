"""Decode over a KV cache on the CPU: the blocked attention core against a plain reference,
the cache writes, cache sizing, and a step-by-step decode that equals a prefill of the same
tokens for every family (sliding windows and sinks included)."""

from __future__ import annotations

import pytest
import torch

from bcgprof.models import kvcache, model_class
from bcgprof.models.layers.kv_attention import (
    decode_attention_core,
    reference_decode_attention,
    write_kv,
)
from bcgprof.spec import family_names

from .test_models_tiny import randomize_, tiny_config
from tolerances import attention_close, model_close

FAMILIES = family_names()


def _cache(S=5, Hkv=2, C=37, D=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(S, Hkv, C, D, generator=g).to(dtype), torch.randn(
        S, Hkv, C, D, generator=g
    ).to(dtype)


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("sinks", [False, True])
@pytest.mark.parametrize("block", [5, 1024])
def test_the_blocked_core_equals_a_plain_softmax_over_the_visible_slots(window, sinks, block):
    k_cache, v_cache = _cache()
    B, Hq, D = 4, 8, 16
    q = torch.randn(B, Hq, D, generator=torch.Generator().manual_seed(1))
    # first slot, inside the first block, across blocks, the last slot
    positions = torch.tensor([0, 3, 17, 36])
    s = torch.randn(Hq) if sinks else None
    out = torch.full_like(q, float("nan"))
    decode_attention_core(
        q, k_cache, v_cache, positions, out, scale=0.25, window=window, sinks=s, block=block
    )
    ref = reference_decode_attention(
        q, k_cache, v_cache, positions, scale=0.25, window=window, sinks=s
    )
    assert torch.isfinite(out).all()
    tol = attention_close(q, k_cache, v_cache, scale=0.25, keys=k_cache.shape[2], sinks=s)
    torch.testing.assert_close(out, ref, **tol)


def test_write_kv_touches_exactly_one_slot_per_sequence():
    k_cache, v_cache = _cache()
    before_k, before_v = k_cache.clone(), v_cache.clone()
    B = 3
    k, v = torch.full((B, 2, 16), 7.0), torch.full((B, 2, 16), -7.0)
    positions = torch.tensor([5, 0, 36])
    write_kv(k_cache, v_cache, k, v, positions)
    changed = (k_cache != before_k).any(dim=(1, 3))  # [S, C]
    expected = torch.zeros_like(changed)
    expected[torch.arange(B), positions] = True
    assert torch.equal(changed, expected)
    assert torch.equal((v_cache != before_v).any(dim=(1, 3)), expected)
    assert torch.equal(k_cache[1, :, 0], k[1]) and torch.equal(v_cache[2, :, 36], v[2])


def test_cache_sizing_follows_the_formula():
    model = model_class("llama")(tiny_config("llama"))
    a = model.layers[0].self_attn
    expected = len(model.layers) * 2 * 6 * a.num_kv_heads * 40 * a.head_dim * 4  # fp32
    assert kvcache.cache_bytes(model, seqs=6, context=40) == expected
    cache = kvcache.allocate(model, 6, 40, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert cache.nbytes == expected and tuple(cache.k[0].shape) == (
        6,
        a.num_kv_heads,
        40,
        a.head_dim,
    )
    per_token = kvcache.kv_bytes_per_token(len(model.layers), a.num_kv_heads, a.head_dim, 4)
    assert expected == per_token * 6 * 40


@pytest.mark.parametrize("family", FAMILIES)
def test_decoding_token_by_token_equals_prefill(family):
    """Sequence b decodes its tokens one step at a time; the last step's output equals a prefill of
    the whole prefix at its last token (causal attention, windows and sinks included)."""
    torch.manual_seed(0)
    model = model_class(family)(tiny_config(family)).eval()
    randomize_(model, 0)
    vocab = model.args.vocab_size
    B, steps, context = 3, 12, 16  # longer than gpt-oss's tiny window of 8
    tokens = torch.randint(0, vocab, (B, steps))
    cache = kvcache.allocate(
        model, B, context, torch.device("cpu"), torch.Generator().manual_seed(1)
    )
    kvcache.attach(model, cache)
    with torch.no_grad():
        for t in range(steps):
            out = model(tokens[:, t], torch.full((B,), t))
    kvcache.attach(model, None)
    with torch.no_grad():
        for b in range(B):
            ref = model(tokens[b], torch.arange(steps))[-1]
            # the same sums in another order (one token vs a prefill's many): a reordering apart
            torch.testing.assert_close(
                out[b], ref, **model_close(model.args, keys=steps, scale=ref.abs().max().item())
            )


def test_sequences_at_different_positions_decode_independently():
    model = model_class("gpt_oss")(tiny_config("gpt_oss")).eval()
    randomize_(model, 0)
    cache = kvcache.allocate(model, 4, 16, torch.device("cpu"), torch.Generator().manual_seed(2))
    kvcache.attach(model, cache)
    ids, positions = torch.tensor([1, 2, 3, 4]), torch.tensor([0, 9, 3, 15])
    with torch.no_grad():
        together = model(ids, positions)
        # sequence 1 alone: its cache row becomes row 0 of a one-sequence cache
        kvcache.attach(
            model,
            kvcache.KVCache(
                [k[1:2].clone() for k in cache.k], [v[1:2].clone() for v in cache.v], 1, 16
            ),
        )
        alone = model(ids[1:2], positions[1:2])
    # a batch of four and one sequence take different float32 kernels: a reordering apart
    tol = model_close(model.args, keys=cache.context, scale=alone.abs().max().item())
    torch.testing.assert_close(together[1], alone[0], **tol)


@pytest.mark.parametrize(
    "report, model",
    [("gpt-oss-20b-h200-decode", "gpt-oss-20b"), ("llama-3.1-8b-h200-decode", "Llama-3.1-8B")],
)
def test_estimate_matches_the_retained_outputs_measured_in_decode(report, model):
    """The committed H200 decode captures: each bucket keeps batch x hidden x dtype bytes, as
    estimate says."""
    from bcgprof.analysis.estimate import estimate_output_buffers
    from bcgprof.report import read_report
    from bcgprof.spec import resolve_model

    r = read_report(f"reports/{report}")
    assert r.run.phase == "decode" and r.run.extra["kv_cache_bytes"] > 0
    est = estimate_output_buffers(resolve_model(model), r.run.buckets, phase="decode")
    measured = {b.bucket: b.retained_output_bytes for b in r.buckets if b.mode == "per-bucket"}
    assert measured == {e.bucket: e.output_bytes for e in est.buckets}
    assert all(b.replay_max_abs_diff in (None, 0.0) for b in r.buckets)


def test_a_kv_cache_that_does_not_fit_is_one_line_with_both_figures():
    from bcgprof.errors import CaptureError
    from bcgprof.measure.workload import check_cache_fits

    with pytest.raises(CaptureError) as info:
        check_cache_fits(128 << 30, 120 << 30, 256, 4096)
    text = str(info.value)
    assert (
        "needs 128.00 GiB" in text
        and "120.00 GiB of GPU memory is free" in text
        and "--context-len" in text
    )
    assert "\n" not in text
    check_cache_fits(1 << 30, 2 << 30, 8, 128)  # fits: no error
