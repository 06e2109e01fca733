"""Each published architecture detail, tested on its own: attention sinks, sliding
windows, YaRN and llama3 RoPE, Qwen3's Q/K norms, gpt-oss's clamped SwiGLU and biased
router, Qwen3-MoE's norm_topk_prob, the MoE dispatch and the attention paths."""

from __future__ import annotations

import math

import pytest
import torch

from bcgprof.models import build_meta, model_class
from bcgprof.models.gpt_oss import make_router as gpt_oss_router
from bcgprof.models.kernels import clamped_swiglu, fused_experts, silu_and_mul
from bcgprof.models.layers.attention import (
    attention,
    attention_core,
    chunked_attention,
    reference_attention,
    sdpa_causal,
    sdpa_causal_sinks,
)
from bcgprof.models.layers.moe import RoutedExperts, TopKRouter
from bcgprof.models.layers.rope import rope_inv_freq, rope_parameters
from bcgprof.models.qwen3_moe import make_router as qwen3_moe_router
from bcgprof.spec import family_names, resolve_model

from .test_models_tiny import inputs, randomize_, tiny_config
from tolerances import (
    ACTIVATION_TERMS,
    TRANSCENDENTAL_ULPS,
    attention_close,
    close,
    mlp_terms,
    model_close,
)

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


def qkv(T=70, Hq=8, Hkv=2, D=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(T, h, D, generator=g).to(dtype) for h in (Hq, Hkv, Hkv))
    return q, k, v


def chunked(q, k, v, *, window=None, sinks=None, block_q=16, block_k=24):
    out = torch.empty_like(q)
    chunked_attention(
        q,
        k,
        v,
        out,
        scale=q.shape[-1] ** -0.5,
        window=window,
        sinks=sinks,
        block_q=block_q,
        tile_elems=q.shape[1] * block_q * block_k,
    )
    return out


def tiny_model(family, seed=0, **overrides):
    model = model_class(family)(tiny_config(family, **overrides)).eval()
    randomize_(model, seed)
    return model


# ------------------------------------------------------------------ attention


@pytest.mark.parametrize("window", [None, 1, 8, 40, 500])
@pytest.mark.parametrize("with_sinks", [False, True])
@pytest.mark.parametrize("blocks", [(16, 24), (7, 5), (1, 1), (64, 512)])
def test_chunked_attention_matches_reference(window, with_sinks, blocks):
    q, k, v = qkv()
    sinks = torch.randn(8, generator=torch.Generator().manual_seed(3)) * 2 if with_sinks else None
    want = reference_attention(q, k, v, scale=0.25, window=window, sinks=sinks)
    got = chunked(q, k, v, window=window, sinks=sinks, block_q=blocks[0], block_k=blocks[1])
    torch.testing.assert_close(
        got, want, **attention_close(q, k, v, scale=0.25, keys=len(k), sinks=sinks)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_core_leaves_its_inputs_alone(dtype):
    q, k, v = qkv(T=9, Hkv=8, dtype=dtype)  # one KV head per query head: views galore
    sinks = torch.randn(8)
    before = [t.clone() for t in (q, k, v, sinks)]
    for block_q, window, s in ((1, None, sinks), (1, 3, None), (4, None, None)):
        out = torch.empty_like(q)
        attention_core(
            q, k, v, out, scale=0.3, window=window, sinks=s, block_q=block_q, tile_elems=8
        )
        assert all(torch.equal(a, b) for a, b in zip(before, (q, k, v, sinks)))
    sdpa_causal_sinks(q, k, v, out, scale=0.3, sinks=sinks)
    sdpa_causal(q, k, v, out, scale=0.3)
    assert all(torch.equal(a, b) for a, b in zip(before, (q, k, v, sinks)))


def test_sinks_match_transformers_eager_attention_and_change_the_output():
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    q, k, v = qkv(T=40)
    sinks = torch.tensor([3.0, -2.0, 0.0, 1.0, 5.0, -5.0, 0.5, 2.0])
    module = torch.nn.Module()
    module.num_key_value_groups, module.sinks, module.training = 4, sinks, False
    causal = torch.full((40, 40), float("-inf")).triu(1)[None, None]
    hf, _ = eager_attention_forward(
        module,
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        causal,
        scaling=0.25,
    )
    got = chunked(q, k, v, sinks=sinks)
    tol = attention_close(q, k, v, scale=0.25, keys=len(k), sinks=sinks)
    torch.testing.assert_close(got, hf[0], **tol)
    no_sinks = chunked(q, k, v)
    # a sink only adds to the denominator: same direction, shrunk by exp(lse) / (exp(lse) +
    # exp(sink))
    assert not torch.allclose(got, no_sinks, **tol)
    scores = (
        torch.einsum("thd,shd->hts", q, k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)) * 0.25
        + causal[0, 0]
    )
    shrink = torch.sigmoid(scores.logsumexp(-1) - sinks[:, None]).T  # [T, heads]
    torch.testing.assert_close(
        got,
        shrink[..., None] * no_sinks,
        **attention_close(q, k, v, scale=0.25, keys=len(k), sinks=sinks, depth=2),
    )
    ratio = got / no_sinks
    assert (ratio > 0).all() and (ratio < 1).all()
    # head 4 (sink 5) is shrunk much more than head 5 (sink -5)
    assert ratio[:, 4].mean() < 0.5 < 0.95 < ratio[:, 5].mean()


def test_sliding_window_ignores_old_keys_and_full_attention_does_not():
    q, k, v = qkv(T=50)
    k2, v2 = k.clone(), v.clone()
    k2[:3] += 5
    v2[:3] -= 5
    for window in (8, None):
        a, b = chunked(q, k, v, window=window), chunked(q, k2, v2, window=window)
        late = slice(3 + (window or 1000) - 1, None)
        if window:
            assert torch.equal(a[late], b[late])  # keys 0..2 are outside every late row's window
            assert not torch.allclose(a[:3], b[:3])
        else:
            assert not torch.allclose(a[10:], b[10:])


def test_sdpa_path_matches_reference_on_cpu():
    # the CUDA path for plain causal attention (expanded KV heads), run on CPU
    q, k, v = qkv(T=33)
    out = torch.empty_like(q)
    sdpa_causal(q, k, v, out, scale=0.3)
    torch.testing.assert_close(
        out,
        reference_attention(q, k, v, scale=0.3),
        **attention_close(q, k, v, scale=0.3, keys=len(k)),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_sinks_path_matches_reference_on_cpu(dtype):
    # the CUDA path for full attention with sinks (flash output rescaled by its
    # log-sum-exp), through the CPU twin of the same aten op
    q, k, v = qkv(T=45, dtype=dtype)
    sinks = torch.randn(8, generator=torch.Generator().manual_seed(4)) * 2
    out = torch.empty_like(q)
    sdpa_causal_sinks(q, k, v, out, scale=0.25, sinks=sinks)
    want = reference_attention(q.float(), k.float(), v.float(), scale=0.25, sinks=sinks)
    # float32 sums
    tol = attention_close(q.float(), k.float(), v.float(), scale=0.25, keys=len(k), sinks=sinks)
    # and three bf16 roundings: the probabilities, the flash output, its rescaling
    if dtype == torch.bfloat16:
        bf16 = close(dtype, reduction=3, scale=v.abs().max().item())
        tol = {key: tol[key] + bf16[key] for key in tol}
    torch.testing.assert_close(out.float(), want, **tol)
    torch.testing.assert_close(
        out.float(), chunked(q.float(), k.float(), v.float(), sinks=sinks), **tol
    )


def test_attention_goes_through_one_graph_break_and_writes_a_preallocated_output():
    from bcgprof.bcg.breaks import break_handler

    seen = []

    def handler(fn, args, kwargs):
        *_, out = args  # q, k, v, out
        seen.append((fn, out.shape, out.data_ptr()))
        assert fn(*args, **kwargs) is None
        seen.append(out.clone())

    q, k, v = qkv(T=20)
    with break_handler(handler):
        result = attention(q, k, v, scale=0.25, window=4, sinks=torch.zeros(8))
    assert seen[0][0] is attention_core and seen[0][1] == q.shape
    assert result.data_ptr() == seen[0][2] and torch.equal(result, seen[1])


def test_gpt_oss_layers_alternate_sliding_and_full():
    config = tiny_config("gpt_oss")
    del config["layer_types"]
    model = model_class("gpt_oss")(config)
    assert [layer.self_attn.window for layer in model.layers] == [8, None, 8, None]
    config["layer_types"] = [
        "full_attention",
        "full_attention",
        "sliding_attention",
        "full_attention",
    ]
    model = model_class("gpt_oss")(config)
    assert [layer.self_attn.window for layer in model.layers] == [None, None, 8, None]
    assert all(layer.self_attn.sinks is not None for layer in model.layers)
    real = build_meta("gpt-oss-20b")
    assert [layer.self_attn.window for layer in real.layers] == [128, None] * 12


def test_qwen3_published_configs_attend_fully():
    for name in ("Qwen3-8B", "Qwen3-30B-A3B"):
        assert {layer.self_attn.window for layer in build_meta(name, num_layers=4).layers} == {None}


# ------------------------------------------------------------------ RoPE


def _hf_rope(name):
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    spec = resolve_model(name)
    cfg = AutoConfig.for_model(**{k: v for k, v in spec.config.items() if k != "architectures"})
    inv, factor = ROPE_INIT_FUNCTIONS[cfg.rope_parameters["rope_type"]](cfg)
    return spec.config, inv, factor


@pytest.mark.parametrize("name, rope_type", [("gpt-oss-20b", "yarn"), ("Llama-3.1-8B", "llama3")])
def test_rope_matches_transformers(name, rope_type):
    config, hf_inv, hf_factor = _hf_rope(name)
    params = rope_parameters(config)
    assert params["rope_type"] == rope_type
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    inv, factor = rope_inv_freq(params, head_dim, config["max_position_embeddings"])
    # transformers' float32 ops in its order, no sum to reorder: apart by at most pow's ulps and the
    # ramp's few roundings; relative alone (atol 0), the frequencies being positive
    torch.testing.assert_close(
        inv, hf_inv, **close(torch.float32, reduction=TRANSCENDENTAL_ULPS + 8, scale=0.0)
    )
    assert factor == pytest.approx(hf_factor, rel=1e-12)
    if rope_type == "yarn":
        assert factor == pytest.approx(0.1 * math.log(32.0) + 1.0)  # YaRN's attention scaling
        assert not torch.allclose(inv, 1.0 / (150000 ** (torch.arange(0, 64, 2).float() / 64)))
    else:
        assert factor == 1.0


def test_rope_cos_sin_match_transformers_rotary_embedding():
    from transformers import GptOssConfig, LlamaConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    pos = torch.tensor([0, 1, 7, 4095, 4096, 8191, 100000, 131071])
    for name, cfg_cls, rope_cls, full in (
        ("gpt-oss-20b", GptOssConfig, GptOssRotaryEmbedding, False),
        ("Llama-3.1-8B", LlamaConfig, LlamaRotaryEmbedding, True),
    ):
        config = resolve_model(name).config
        hf = rope_cls(cfg_cls(**{k: v for k, v in config.items() if k != "architectures"}))
        cos_ref, sin_ref = hf(torch.zeros(1, dtype=torch.float32), pos[None])
        rope = build_meta(name, num_layers=1).rotary["r0"].to_empty(device="cpu")
        cos, sin = rope(pos)
        half = cos.shape[-1]
        # the same float32 angle (one product) in both: cos/sin's ulps and the attention factor's
        # rounding
        tol = close(
            torch.float32, reduction=TRANSCENDENTAL_ULPS + 1, scale=cos_ref.abs().max().item()
        )
        torch.testing.assert_close(cos, cos_ref[0, :, :half], **tol)
        torch.testing.assert_close(sin, sin_ref[0, :, :half], **tol)
        if full:  # Llama repeats the frequencies for the two halves
            torch.testing.assert_close(cos, cos_ref[0, :, half:], **tol)


def test_both_config_dialects_give_identical_outputs():
    published = tiny_config("gpt_oss")
    params = dict(published["rope_scaling"], rope_theta=150000.0)
    flat = {k: v for k, v in published.items() if k not in ("rope_theta", "rope_scaling")}
    new = dict(flat, rope_parameters=params)
    nested = dict(
        flat, rope_parameters={"sliding_attention": params, "full_attention": dict(params)}
    )
    legacy = dict(
        published,
        rope_scaling={
            **{k: v for k, v in params.items() if k not in ("rope_type", "rope_theta")},
            "type": "yarn",
        },
    )
    ids, pos = inputs(256, 60)
    outs = []
    for config in (published, new, nested, legacy):
        assert rope_parameters(config) == rope_parameters(published)
        model = model_class("gpt_oss")(config).eval()
        randomize_(model)
        with torch.no_grad():
            outs.append(model(ids, pos))
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_rope_dialect_details():
    # theta default when absent, original context defaulting to max_position_embeddings
    assert rope_parameters({"max_position_embeddings": 10})["rope_theta"] == 10000.0
    p = rope_parameters(
        {
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
            "max_position_embeddings": 64,
            "rope_theta": 5.0,
        }
    )
    assert p["original_max_position_embeddings"] == 64 and p["rope_theta"] == 5.0
    per_type = {
        "rope_parameters": {
            "full_attention": {"rope_theta": 1e6, "rope_type": "default"},
            "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"},
        }
    }
    assert rope_parameters(per_type, "sliding_attention")["rope_theta"] == 1e4
    assert rope_parameters(per_type, "full_attention")["rope_theta"] == 1e6
    from bcgprof.errors import ModelConfigError

    with pytest.raises(ModelConfigError, match="rope_type 'dynamic' is not supported"):
        rope_inv_freq(
            rope_parameters({"rope_scaling": {"type": "dynamic", "factor": 2.0}}), 16, 100
        )


def test_rope_buffers_stay_float32_through_casts_and_meta():
    with torch.device("meta"):
        model = model_class("gpt_oss")(tiny_config("gpt_oss"))
    model = model.to(torch.bfloat16).to_empty(device="cpu")
    rope = model.rotary["r0"]
    assert rope.inv_freq.dtype == torch.float32 and rope.inv_freq.device.type == "cpu"
    want, factor = rope_inv_freq(rope.params, 16, 131072)
    assert rope.attention_scaling == factor > 1  # YaRN
    assert torch.equal(rope.inv_freq, want)
    model.to(torch.float16)
    assert torch.equal(rope.inv_freq, want)


# ------------------------------------------------------------------ Qwen3 Q/K norms


@pytest.mark.parametrize("family", ["qwen3", "qwen3_moe"])
def test_qwen3_has_qk_norms_and_they_matter(family):
    model = tiny_model(family)
    names = model.checkpoint_shapes()
    assert names["model.layers.0.self_attn.q_norm.weight"] == (model.args.head_dim,)
    assert "model.layers.2.self_attn.k_norm.weight" in names
    ids, pos = inputs(256, 30)
    with torch.no_grad():
        before = model(ids, pos)
        model.layers[1].self_attn.k_norm.weight.mul_(3.0)
        after = model(ids, pos)
    assert not torch.allclose(
        before, after, **model_close(model.args, keys=len(ids), scale=before.abs().max().item())
    )
    assert "q_norm" not in str(tiny_model("llama"))


# ------------------------------------------------------------------ gpt-oss MoE


def test_clamped_swiglu_by_hand():
    alpha, limit = 1.702, 7.0
    gate = [-10.0, -1.0, 0.0, 3.0, 7.0, 10.0]
    up = [-10.0, 0.5, 2.0, -3.0, 8.0, 10.0]
    gate_up = torch.tensor([v for pair in zip(gate, up) for v in pair])[None]  # interleaved [1, 12]
    got = clamped_swiglu(gate_up, alpha, limit)[0]
    want = []
    for g, u in zip(gate, up):
        g, u = min(g, limit), max(-limit, min(u, limit))  # gate clamped above only, up both ways
        want.append((u + 1) * g / (1 + math.exp(-alpha * g)))
    want = torch.tensor(want)  # float64 math rounded once to float32: one more rounding
    torch.testing.assert_close(
        got,
        want,
        **close(torch.float32, reduction=ACTIVATION_TERMS + 1, scale=want.abs().max().item()),
    )
    # gate -10 kept
    assert got[0].item() == pytest.approx((-7 + 1) * -10 / (1 + math.exp(17.02)), rel=1e-5)
    # both clamped to 7
    assert got[5].item() == pytest.approx(8 * 7 / (1 + math.exp(-1.702 * 7)), rel=1e-6)


def test_gpt_oss_router_bias_and_topk_softmax():
    args = model_class("gpt_oss")(
        tiny_config("gpt_oss", num_local_experts=4, num_experts_per_tok=2)
    ).args
    router = gpt_oss_router(args)
    with torch.no_grad():
        router.weight.zero_()
        router.weight[:, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0])
        router.bias.copy_(torch.tensor([5.0, 0.0, 0.0, 0.0]))
    x = torch.zeros(2, 64)
    x[0, 0], x[1, 0] = 1.0, 10.0
    route = router(x)
    # token 0: logits [6, 2, 3, 4] -> experts 0 (bias decides) and 3; token 1: [15, 20, 30, 40] ->
    # 3, 2
    assert route.ids.tolist() == [[0, 3], [3, 2]]
    torch.testing.assert_close(route.weights[0], torch.softmax(torch.tensor([6.0, 4.0]), 0))
    torch.testing.assert_close(route.weights[1], torch.softmax(torch.tensor([40.0, 30.0]), 0))
    # against transformers' router
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssTopKRouter

    hf = GptOssTopKRouter(GptOssConfig(hidden_size=64, num_local_experts=4, num_experts_per_tok=2))
    hf.load_state_dict(router.state_dict())
    x = torch.randn(30, 64)
    _, scores, ids = hf(x)
    route = router(x)
    assert torch.equal(route.ids, ids) and torch.equal(route.weights, scores)


@pytest.mark.parametrize("norm", [True, False])
def test_qwen3_moe_router_norm_topk_prob(norm):
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    config = tiny_config("qwen3_moe", norm_topk_prob=norm, num_experts=128, num_experts_per_tok=8)
    router = qwen3_moe_router(model_class("qwen3_moe")(dict(config, num_hidden_layers=1)).args)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        router.weight.copy_(torch.randn(router.weight.shape, generator=gen) * 0.1)
    hf = Qwen3MoeTopKRouter(
        Qwen3MoeConfig(hidden_size=64, num_experts=128, num_experts_per_tok=8, norm_topk_prob=norm)
    )
    hf.load_state_dict(router.state_dict())
    x = torch.randn(40, 64, generator=gen)
    _, scores, ids = hf(x)
    route = router(x)
    assert torch.equal(route.ids, ids)
    # the logits' hidden terms count |logit| times through the exp, the softmax sums over every
    # expert, the renormalisation over the top k
    logit = max(1, math.ceil((x.abs() @ router.weight.abs().T).max().item()))
    terms = (
        config["hidden_size"] * logit
        + config["num_experts"]
        + config["num_experts_per_tok"]
        + TRANSCENDENTAL_ULPS
    )
    torch.testing.assert_close(route.weights, scores, **close(torch.float32, reduction=terms))
    sums = route.weights.sum(-1)
    if norm:
        torch.testing.assert_close(sums, torch.ones(40))
    else:
        assert (sums < 0.99).all()  # 8 of 128 experts hold only part of the mass


def test_both_moe_families_route_through_one_router_class():
    for family, name in (("gpt_oss", "router"), ("qwen3_moe", "gate")):
        assert type(getattr(tiny_model(family).layers[0].mlp, name)) is TopKRouter
    with pytest.raises(ValueError, match="apply when softmax_before_topk is set"):
        TopKRouter(64, 8, 2, renormalize=True)


def _naive_moe(x, route, w1, w2, act, b1=None, b2=None):
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for slot in range(route.ids.shape[1]):
            e = route.ids[t, slot]
            h = x[t] @ w1[e] + (b1[e] if b1 is not None else 0)
            y = act(h[None])[0] @ w2[e] + (b2[e] if b2 is not None else 0)
            out[t] += route.weights[t, slot] * y
    return out


def _moe_case(T=50, E=16, k=4, H=32, I=24, seed=0, empty_experts=()):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    logits = torch.randn(T, E, generator=g)
    for e in empty_experts:
        logits[:, e] = -1e9
    top, ids = logits.topk(k, dim=-1)
    route = RoutedExperts(ids, torch.softmax(top, -1))
    w1, b1 = torch.randn(E, H, 2 * I, generator=g) * 0.2, torch.randn(E, 2 * I, generator=g)
    w2, b2 = torch.randn(E, I, H, generator=g) * 0.2, torch.randn(E, H, generator=g)
    return x, route, w1, w2, b1, b2


def _clamped(alpha, limit):
    return lambda h: clamped_swiglu(h, alpha, limit)


def test_fused_experts_matches_naive_loop():
    x, route, w1, w2, b1, b2 = _moe_case(empty_experts=(0, 5, 15))
    got = fused_experts(
        x, route.ids, route.weights, w1, w2, "clamped_swiglu", b1, b2, alpha=1.702, limit=1.0
    )
    want = _naive_moe(x, route, w1, w2, _clamped(1.702, 1.0), b1, b2)
    terms = mlp_terms(hidden=w1.shape[1], intermediate=w2.shape[1], experts=route.ids.shape[1])
    torch.testing.assert_close(
        got, want, **close(torch.float32, reduction=terms, scale=want.abs().max().item())
    )
    got = fused_experts(x, route.ids, route.weights, w1, w2, "silu")
    want = _naive_moe(x, route, w1, w2, silu_and_mul)
    torch.testing.assert_close(
        got, want, **close(torch.float32, reduction=terms, scale=want.abs().max().item())
    )


def test_moe_forward_is_bit_identical_run_to_run():
    for family in ("gpt_oss", "qwen3_moe"):
        model = tiny_model(family)
        ids, pos = inputs(256, 120)
        with torch.no_grad():
            a, b = model(ids, pos), model(ids, pos)
        assert torch.equal(a, b)
    x, route, w1, w2, b1, b2 = _moe_case(T=300, E=64, k=8)
    runs = [fused_experts(x, route.ids, route.weights, w1, w2, "silu", b1, b2) for _ in range(3)]
    assert all(torch.equal(runs[0], r) for r in runs[1:])


def test_bf16_forward_runs_and_tracks_float32():
    for family in family_names():
        model = tiny_model(family, seed=2)
        ids, pos = inputs(256, 64)
        with torch.no_grad():
            ref = model(ids, pos)
            out = model.to(torch.bfloat16)(ids, pos)
        assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
        assert (out.float() - ref).abs().mean() < 0.1 * ref.abs().mean()
