"""Capturability and memory shape of the forward, checked on CPU.

A CUDA graph cannot hold a host synchronisation or an allocation whose size depends
on tensor values. A ``TorchDispatchMode`` sees every aten op the forward runs (except
inside the attention core, which the breakable graph runs eagerly) and fails on the
ops that imply either. A second mode records the largest tensor the forward creates,
to show the MoE never materialises anything of T x num_experts x (hidden or
intermediate) elements.
"""

from __future__ import annotations

import pytest
import torch

from bcgprof.models import model_class
from bcgprof.models.layers.attention import chunked_attention
from bcgprof.spec import family_names

from .meta_forward import TOKENS, Watch, run_watched
from .test_models_tiny import inputs, randomize_, tiny_config


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


def tiny(family, **overrides):
    model = model_class(family)(tiny_config(family, **overrides)).eval()
    randomize_(model)
    return model


@pytest.mark.parametrize("family", family_names())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_has_no_host_sync_outside_the_attention_core(family, dtype):
    model = tiny(family).to(dtype)
    ids, pos = inputs(256, 48)
    watch = run_watched(model, ids, pos)
    assert watch.forbidden == []


def test_the_watch_catches_host_syncs():
    watch = Watch()
    x = torch.arange(6.0)
    with watch:
        x.sum().item()
        x[x > 2]
        torch.bincount(torch.tensor([1, 2]))
    assert len(watch.forbidden) == 3
    watch.paused = True  # the attention core's: kept apart
    with watch:
        x.sum().item()
    assert len(watch.forbidden) == 3 and len(watch.core_forbidden) == 1


PRESETS = ["gpt-oss-20b", "gpt-oss-120b", "Llama-3.1-8B", "Qwen3-8B", "Qwen3-30B-A3B"]


@pytest.mark.parametrize("name", PRESETS)
def test_preset_forward_runs_on_meta_tensors_at_16k(name, meta_forward_16k):
    # On the meta device a tensor has a shape and no data: any op that needs values on
    # the host (.item(), .tolist(), nonzero, a data-dependent size) raises. The whole
    # forward of two layers, attention core included, runs: shapes depend on T alone.
    run = meta_forward_16k(name)
    assert run.out_shape == (TOKENS, run.hidden_size) and run.out_dtype == torch.bfloat16
    assert run.forbidden == [] and run.core_forbidden == []


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gpt-oss-120b", "Qwen3-30B-A3B"])
def test_preset_moe_transients_are_tokens_times_top_k(name, meta_forward_16k):
    # the real shapes at 16k tokens, on meta: nothing the MoE layers create is larger
    # than its [T*k, 2I] gate/up or [T*k, H] rows (fused-MoE memory), nothing is T x E x anything
    run = meta_forward_16k(name)  # the largest tensor outside the attention core
    a, T = run.args, TOKENS
    largest, where = run.largest
    assert largest <= T * a.top_k * max(2 * a.moe_intermediate_size, a.hidden_size), where
    assert largest < T * a.num_experts * min(a.hidden_size, a.moe_intermediate_size), where


def test_moe_transients_scale_with_top_k_not_with_experts():
    # many experts, few per token: a dense T x E x H (or I) tensor would dwarf T x k x 2I
    T, E, k, H, I = 256, 128, 2, 64, 32
    model = tiny(
        "gpt_oss",
        num_local_experts=E,
        num_experts_per_tok=k,
        experts_per_token=k,
        hidden_size=H,
        intermediate_size=I,
        num_hidden_layers=2,
        layer_types=None,
    )
    watch = run_watched(model, *inputs(256, T))
    largest, where = watch.largest
    params = max(p.numel() for p in model.parameters())
    # largest activation: the [T*k, 2I] gate_up rows (or the [T, E] router logits); the
    # expert weights themselves are parameters, never copied
    bound = max(T * k * 2 * I, T * H * 4)
    assert largest <= max(bound, params), where
    assert largest < T * E * min(H, I) // 8, where


@pytest.mark.parametrize("window, sinks", [(None, False), (16, True), (None, True)])
def test_chunked_attention_never_builds_a_t_by_t_matrix(window, sinks):
    T, Hq, Hkv, D = 1024, 4, 2, 8
    q, k, v = (torch.randn(T, h, D) for h in (Hq, Hkv, Hkv))
    out = torch.empty_like(q)
    watch = Watch()
    with watch:
        chunked_attention(
            q,
            k,
            v,
            out,
            scale=0.3,
            window=window,
            sinks=torch.zeros(Hq) if sinks else None,
            block_q=64,
            tile_elems=Hq * 64 * 128,
        )
    largest, where = watch.largest
    assert largest <= max(Hq * 64 * 128, T * Hq * D), where  # one tile, or a [T, H, D] tensor
    assert largest < T * T, where
