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
from torch.utils._python_dispatch import TorchDispatchMode

from bcgprof.bcg.breaks import break_handler
from bcgprof.models import build_meta, model_class
from bcgprof.models.layers.attention import chunked_attention
from bcgprof.spec import family_names

from .test_models_tiny import inputs, randomize_, tiny_config

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


# ops that read a device value on the host or size their output by the values
HOST_SYNC = {
    aten._local_scalar_dense.default,  # .item(), bool(t), int(t), .tolist()
    aten.is_nonzero.default,
    aten.equal.default,
    aten.nonzero.default,
    aten.nonzero_static.default,  # static, but still not what we want here
    aten.bincount.default,
    aten.unique_consecutive.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.masked_select.default,
    aten.masked_scatter.default,
    aten._assert_async.default,
    aten._assert_async.msg,
    aten.histc.default,
    aten.repeat_interleave.Tensor,  # without output_size it syncs
}


class Watch(TorchDispatchMode):
    """Records ops and output sizes; ``paused`` while the graph break runs its op eagerly."""

    def __init__(self):
        super().__init__()
        self.paused = False
        self.forbidden: list[str] = []
        self.largest = (0, None)
        self.ops: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        self.ops.add(func)
        if func in HOST_SYNC:
            self.forbidden.append(str(func))
        # boolean-mask indexing runs nonzero inside the kernel
        if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default) and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool
            for i in (args[1] or ())
            if i is not None
        ):
            self.forbidden.append(f"{func} with a boolean mask")
        if func.is_view:  # a view allocates nothing
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.numel() > self.largest[0]:
                self.largest = (t.numel(), f"{func} {tuple(t.shape)}")
        return out


def run_watched(model, ids, pos) -> Watch:
    watch = Watch()

    def eager_break(fn, args, kwargs):
        watch.paused = True
        try:
            fn(*args, **kwargs)
        finally:
            watch.paused = False

    with torch.no_grad(), break_handler(eager_break), watch:
        model(ids, pos)
    return watch


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


PRESETS = ["gpt-oss-20b", "gpt-oss-120b", "Llama-3.1-8B", "Qwen3-8B", "Qwen3-30B-A3B"]


@pytest.mark.parametrize("name", PRESETS)
def test_preset_forward_runs_on_meta_tensors_at_16k(name):
    # On the meta device a tensor has a shape and no data: any op that needs values on
    # the host (.item(), .tolist(), nonzero, a data-dependent size) raises. The whole
    # forward, attention core included, runs: shapes depend on T alone.
    model = build_meta(name, num_layers=2).to(torch.bfloat16)
    ids = torch.zeros(16384, dtype=torch.long, device="meta")
    watch = Watch()
    with torch.no_grad(), watch:
        out = model(ids, ids)
    assert out.shape == (16384, model.hidden_size) and out.dtype == torch.bfloat16
    assert watch.forbidden == []


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gpt-oss-120b", "Qwen3-30B-A3B"])
def test_preset_moe_transients_are_tokens_times_top_k(name):
    # the real shapes at 16k tokens, on meta: nothing the MoE layer creates is larger
    # than its [T*k, 2I] gate/up or [T*k, H] rows (fused-MoE memory), nothing is T x E x anything
    model = build_meta(name, num_layers=1).to(torch.bfloat16)
    a, T = model.args, 16384
    ids = torch.zeros(T, dtype=torch.long, device="meta")
    watch = run_watched(model, ids, ids)  # attention core paused
    largest, where = watch.largest
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
