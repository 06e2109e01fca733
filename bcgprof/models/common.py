"""Pieces every family shares: config reading, RMSNorm, RoPE (default, linear, llama3,
YaRN), the attention graph-break point, the dense SwiGLU MLP and the MoE dispatch.

Everything here is written for prefill with no KV cache: a forward sees T tokens, the
token ids ``[T]`` and their positions ``[T]``, and produces ``[T, hidden]``.

Capture rules the forward obeys (a breakable CUDA graph records everything but the
attention core): static shapes for a given T, no host synchronisation (no ``.item()``,
``nonzero``, boolean indexing, data-dependent Python branches, ``bincount``), no
allocation whose size depends on tensor values. The attention core runs eagerly behind
:func:`bcgprof.bcg.breaks.graph_break`; it may do anything, but writes into an output
tensor allocated before the break.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bcgprof.bcg.breaks import graph_break
from bcgprof.errors import ModelConfigError

# --------------------------------------------------------------------------- config


def _first(config: dict, *keys: str, default: Any = None) -> Any:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return default


@dataclass
class ModelArgs:
    """Everything a layer stack needs from config.json, read in one place.

    Head counts and intermediate sizes live here (and are copied onto the modules as
    attributes) so that a later tensor-parallel split divides them in one spot.
    """

    family: str
    hidden_size: int
    num_layers: int  # layers actually built (num_hidden_layers, or the truncation)
    total_layers: int  # num_hidden_layers of the config
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    max_position_embeddings: int
    layer_types: list[str]  # "full_attention" | "sliding_attention", one per built layer
    sliding_window: int | None
    attention_bias: bool = False
    mlp_bias: bool = False
    intermediate_size: int = 0  # dense MLP
    qk_norm: bool = False
    # MoE
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    moe_layers: list[bool] = field(default_factory=list)  # per built layer: MoE (True) or dense
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    rope_theta_default: float = 10000.0
    # tensor parallelism: this rank's index and the number of ranks (1 = unsharded)
    tp_rank: int = 0
    tp_size: int = 1

    def window(self, layer_idx: int) -> int | None:
        """The sliding window of a layer, or None for full causal attention."""
        if self.layer_types[layer_idx] == "sliding_attention" and self.sliding_window:
            return int(self.sliding_window)
        return None

    @classmethod
    def from_config(cls, config: dict, family: str, num_layers: int | None = None) -> "ModelArgs":
        total = int(config["num_hidden_layers"])
        if num_layers is None:
            num_layers = total
        if not isinstance(num_layers, int) or not 1 <= num_layers <= total:
            raise ModelConfigError(
                f"num_layers must be between 1 and {total} (the model's num_hidden_layers), got {num_layers}"
            )
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(_first(config, "num_key_value_heads", default=heads))
        head_dim = int(_first(config, "head_dim", default=hidden // heads))
        if heads % kv_heads:
            raise ModelConfigError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
        act = config.get("hidden_act", "silu")
        if family != "gpt_oss" and act not in ("silu", "swish"):
            raise ModelConfigError(f"hidden_act {act!r} is not supported for {family}; bcgprof implements silu")

        sliding = config.get("sliding_window")
        if family == "gpt_oss":
            default_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(total)]
        elif family == "qwen3":
            if not config.get("use_sliding_window", False):
                sliding = None
            mwl = int(config.get("max_window_layers", total))
            default_types = [
                "sliding_attention" if sliding is not None and i >= mwl else "full_attention" for i in range(total)
            ]
        elif family == "qwen3_moe":
            if not config.get("use_sliding_window", False):
                sliding = None
            # transformers applies qwen3_moe's window to every layer when it is on
            default_types = ["sliding_attention" if sliding is not None else "full_attention"] * total
        else:  # llama
            sliding = None
            default_types = ["full_attention"] * total
        layer_types = config.get("layer_types") or default_types
        if len(layer_types) < total:
            raise ModelConfigError(f"layer_types lists {len(layer_types)} layers, num_hidden_layers is {total}")
        for t in layer_types:
            if t not in ("full_attention", "sliding_attention"):
                raise ModelConfigError(f"layer type {t!r} is not supported (full_attention, sliding_attention)")

        args = cls(
            family=family,
            hidden_size=hidden,
            num_layers=num_layers,
            total_layers=total,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            vocab_size=int(config["vocab_size"]),
            rms_norm_eps=float(_first(config, "rms_norm_eps", default=1e-6)),
            max_position_embeddings=int(_first(config, "max_position_embeddings", default=4096)),
            layer_types=list(layer_types[:num_layers]),
            sliding_window=int(sliding) if sliding else None,
            attention_bias=bool(config.get("attention_bias", family == "gpt_oss")),
            mlp_bias=bool(config.get("mlp_bias", False)),
            intermediate_size=int(_first(config, "intermediate_size", default=0)),
            qk_norm=family in ("qwen3", "qwen3_moe"),
        )
        if family == "gpt_oss":
            args.num_experts = int(_first(config, "num_local_experts", "num_experts"))
            args.top_k = int(_first(config, "num_experts_per_tok", "experts_per_token"))
            args.moe_intermediate_size = args.intermediate_size
            args.moe_layers = [True] * num_layers
            args.swiglu_alpha = float(_first(config, "swiglu_alpha", default=1.702))
            args.swiglu_limit = float(_first(config, "swiglu_limit", default=7.0))
            args.rope_theta_default = 150000.0
        elif family == "qwen3_moe":
            # published configs say num_experts; transformers 5 writes num_local_experts
            args.num_experts = int(_first(config, "num_experts", "num_local_experts"))
            args.top_k = int(config["num_experts_per_tok"])
            args.moe_intermediate_size = int(config["moe_intermediate_size"])
            args.norm_topk_prob = bool(config.get("norm_topk_prob", False))
            step = int(config.get("decoder_sparse_step", 1) or 1)
            dense = set(config.get("mlp_only_layers") or [])
            args.moe_layers = [
                i not in dense and args.num_experts > 0 and (i + 1) % step == 0 for i in range(num_layers)
            ]
        if args.num_experts and not 1 <= args.top_k <= args.num_experts:
            raise ModelConfigError(f"num_experts_per_tok {args.top_k} must be in 1..{args.num_experts}")
        return args

    def shard(self, tp_rank: int, tp_size: int) -> "ModelArgs":
        """Set this rank's place in a tensor-parallel group, after checking the split works."""
        check_tensor_parallel(self, tp_size)
        if not 0 <= tp_rank < tp_size:
            raise ModelConfigError(f"tensor-parallel rank {tp_rank} is outside 0..{tp_size - 1}")
        self.tp_rank, self.tp_size = int(tp_rank), int(tp_size)
        return self


# --------------------------------------------------------------------------- tensor parallelism
#
# The split follows the serving engines (Megatron-style, as vLLM and SGLang do it):
#
# * attention: query heads split evenly over the ranks; KV heads split too when they
#   divide by the ranks, otherwise (fewer KV heads than ranks) each rank keeps the one KV
#   head its query heads read (replicated). qkv_proj is column-parallel, o_proj
#   row-parallel; sinks go with their heads.
# * dense MLP: gate_up column-parallel (this rank's slice of the intermediate for gate
#   and up), down row-parallel.
# * MoE: every rank holds every expert with intermediate / tp columns; the router is
#   replicated.
# * a row-parallel output's bias is added on rank 0 only, and the partial outputs are
#   summed by one all-reduce after the attention output projection and one after the
#   MLP/MoE (:func:`tp_all_reduce`), inside the captured graph segments.
# * embedding, norms and rotary tables are replicated (no vocab-parallel embedding: the
#   stack has no LM head, and the replicated table is what it costs).


def check_tensor_parallel(args: "ModelArgs", tp_size: int) -> None:
    """Raise one ModelConfigError line if the stack cannot be split over ``tp_size`` ranks."""
    if not isinstance(tp_size, int) or tp_size < 1:
        raise ModelConfigError(f"tensor-parallel size must be a positive integer, got {tp_size!r}")
    if tp_size == 1:
        return
    problems = []
    if args.num_heads % tp_size:
        problems.append(f"num_attention_heads {args.num_heads} is not divisible by {tp_size}")
    if args.num_kv_heads % tp_size and tp_size % args.num_kv_heads:
        problems.append(
            f"num_key_value_heads {args.num_kv_heads} neither divides by {tp_size} nor divides it "
            "(KV heads are split, or replicated when fewer than the ranks)"
        )
    dense = [not m for m in args.moe_layers] if args.moe_layers else [True] * args.num_layers
    if any(dense) and args.intermediate_size % tp_size:
        problems.append(f"intermediate_size {args.intermediate_size} is not divisible by {tp_size}")
    if args.num_experts and any(args.moe_layers) and args.moe_intermediate_size % tp_size:
        name = "intermediate_size" if args.family == "gpt_oss" else "moe_intermediate_size"
        problems.append(f"expert {name} {args.moe_intermediate_size} is not divisible by {tp_size}")
    if problems:
        raise ModelConfigError(f"cannot split the {args.family} stack over {tp_size} tensor-parallel ranks: "
                               + "; ".join(problems))


def tp_all_reduce(x: torch.Tensor, tp_size: int) -> torch.Tensor:
    """Sum ``x`` over the tensor-parallel ranks, in place, and return it.

    A no-op for one rank. Otherwise ``torch.distributed.all_reduce`` on the default
    process group: with NCCL it is an ordinary kernel on the current stream (no host
    synchronisation), so it is captured into the graph segment like any other op.
    """
    if tp_size == 1:
        return x
    import torch.distributed as dist

    dist.all_reduce(x)
    return x


def row_parallel_linear(x: torch.Tensor, linear: nn.Linear, tp_rank: int, tp_size: int) -> torch.Tensor:
    """``linear(x)`` for a row-parallel weight: partial products summed over the ranks,
    the bias added once (by rank 0, before the all-reduce)."""
    if tp_size == 1:
        return linear(x)
    bias = linear.bias if tp_rank == 0 else None
    return tp_all_reduce(F.linear(x, linear.weight, bias), tp_size)


def shard_range(n: int, tp_rank: int, tp_size: int) -> slice:
    """This rank's contiguous 1/tp share of ``n`` (n divisible by tp_size)."""
    part = n // tp_size
    return slice(tp_rank * part, (tp_rank + 1) * part)


# --------------------------------------------------------------------------- RoPE


def rope_parameters(config: dict, layer_type: str | None = None, default_theta: float = 10000.0) -> dict:
    """One RoPE description from either config dialect.

    Published configs say ``rope_theta`` plus ``rope_scaling`` (a dict or null, its type
    under ``rope_type`` or the older ``type``). Configs written by transformers 5 say
    ``rope_parameters``: a dict holding ``rope_theta``, ``rope_type`` and the scaling
    keys, or one such dict per layer type. Returns a flat dict with at least
    ``rope_type`` and ``rope_theta``, plus ``original_max_position_embeddings`` for the
    scaled types, as transformers standardises it.
    """
    params = config.get("rope_parameters")
    if isinstance(params, dict) and any(isinstance(v, dict) for v in params.values()):
        nested = {k: v for k, v in params.items() if isinstance(v, dict)}
        key = layer_type if layer_type in nested else ("full_attention" if "full_attention" in nested else None)
        if key is None:
            raise ModelConfigError(f"rope_parameters has no entry for layer type {layer_type!r}: {sorted(nested)}")
        params = nested[key]
    merged: dict = {}
    if isinstance(config.get("rope_scaling"), dict):
        merged.update(config["rope_scaling"])
    if isinstance(params, dict):
        merged.update(params)
    rope_type = merged.get("rope_type") or merged.get("type") or "default"
    theta = merged.get("rope_theta")
    if theta is None:
        theta = config.get("rope_theta", default_theta)
    merged["rope_type"] = rope_type
    merged["rope_theta"] = float(theta)
    merged.pop("type", None)
    if rope_type in ("llama3", "yarn"):
        merged.setdefault("original_max_position_embeddings", config.get("max_position_embeddings"))
    if float(merged.get("partial_rotary_factor") or 1.0) != 1.0:
        raise ModelConfigError("partial_rotary_factor != 1 is not supported")
    return merged


def rope_inv_freq(params: dict, head_dim: int, max_position_embeddings: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies ``[head_dim // 2]`` (float32, CPU) and the cos/sin scale.

    Follows transformers' ``ROPE_INIT_FUNCTIONS`` for default, linear, llama3 and yarn.
    """
    base = params["rope_theta"]
    dim = head_dim
    rope_type = params["rope_type"]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim))
    if rope_type == "default":
        return inv_freq, 1.0
    if rope_type == "linear":
        return inv_freq / float(params["factor"]), 1.0
    if rope_type == "llama3":
        factor = float(params["factor"])
        low_ff, high_ff = float(params["low_freq_factor"]), float(params["high_freq_factor"])
        old_len = float(params["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_len / low_ff, old_len / high_ff
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0
    if rope_type == "yarn":
        factor = params.get("factor")
        orig = float(params["original_max_position_embeddings"])
        if factor is None:
            factor = max_position_embeddings / orig
        factor = float(factor)

        def get_mscale(scale: float, mscale: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

        attention_factor = params.get("attention_factor")
        if attention_factor is None:
            mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
            if mscale and mscale_all:
                attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all)
            else:
                attention_factor = get_mscale(factor)
        beta_fast = params.get("beta_fast") or 32
        beta_slow = params.get("beta_slow") or 1

        def correction_dim(rotations: float) -> float:
            return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if params.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        pos_freqs = base ** (torch.arange(0, dim, 2).to(torch.float32) / dim)
        extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
        extra_factor = 1 - ramp
        inv = interpolation * (1 - extra_factor) + extrapolation * extra_factor
        return inv, float(attention_factor)
    raise ModelConfigError(f"rope_type {rope_type!r} is not supported (default, linear, llama3, yarn)")


class RotaryEmbedding(nn.Module):
    """cos/sin ``[T, head_dim // 2]`` for the given positions, computed on the fly.

    ``inv_freq`` is a non-persistent float32 buffer. It is recomputed whenever the module
    is moved or cast (``to_empty`` after a meta build leaves it uninitialised, a cast to
    bf16 would round it), so it is always exact float32 on the module's device.
    """

    def __init__(self, params: dict, head_dim: int, max_position_embeddings: int):
        super().__init__()
        self.params = dict(params)
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        inv_freq, self.attention_scaling = rope_inv_freq(self.params, head_dim, max_position_embeddings)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def reset_buffers(self) -> None:
        inv_freq, self.attention_scaling = rope_inv_freq(self.params, self.head_dim, self.max_position_embeddings)
        if self.inv_freq.device.type != "meta":
            inv_freq = inv_freq.to(self.inv_freq.device)
        else:
            inv_freq = torch.empty_like(inv_freq, device="meta")
        self.inv_freq = inv_freq  # re-registers the buffer (float32)

    def _apply(self, fn, recurse=True):  # type: ignore[override]
        super()._apply(fn, recurse)
        self.reset_buffers()
        return self

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]  # [T, D/2]
        return freqs.cos() * self.attention_scaling, freqs.sin() * self.attention_scaling


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox-style rotation of ``x`` [T, H, D] (halves, as transformers' rotate_half).

    cos/sin are cast to x's dtype first, as transformers does.
    """
    cos = cos.to(x.dtype)[:, None, :]  # [T, 1, D/2]
    sin = sin.to(x.dtype)[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


# --------------------------------------------------------------------------- norm


class RMSNorm(nn.Module):
    """RMSNorm in float32 over the last dim.

    ``weight_in_fp32`` picks where the weight is applied: gpt-oss multiplies the float32
    normalised values and casts once; Llama/Qwen cast first and multiply in the input dtype.
    """

    def __init__(self, dim: int, eps: float, weight_in_fp32: bool = False):
        super().__init__()
        self.eps = eps
        self.weight_in_fp32 = weight_in_fp32
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.to(torch.float32)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight_in_fp32:
            return (self.weight * xf).to(dtype)
        return self.weight * xf.to(dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


# --------------------------------------------------------------------------- attention

# Query rows per block and the budget of one float32 score tile of the chunked path.
# Tests lower these to exercise block boundaries on tiny models.
ATTN_BLOCK_Q = 512
ATTN_TILE_ELEMS = 1 << 24  # 16M float32 = 64 MiB per [heads, block_q, block_k] tile


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of T tokens over themselves, through the graph-break point.

    q [T, Hq, D], k and v [T, Hkv, D] (Hq a multiple of Hkv; query head h reads KV head
    h // (Hq // Hkv)). ``window``: attend only to the last ``window`` keys (i - window < j
    <= i). ``sinks`` [Hq]: a learned logit per head added to the softmax denominator
    (gpt-oss). Returns [T, Hq, D].

    The output is allocated here, before the break, so nothing the break creates has
    to outlive it; the core writes into it and returns None.
    """
    out = torch.empty_like(q)  # [T, Hq, D]
    graph_break(
        _attention_core, q, k, v, out, scale=scale, window=window, sinks=sinks, block_q=ATTN_BLOCK_Q,
        tile_elems=ATTN_TILE_ELEMS,
    )
    return out


def _attention_core(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    scale: float,
    window: int | None,
    sinks: torch.Tensor | None,
    block_q: int = ATTN_BLOCK_Q,
    tile_elems: int = ATTN_TILE_ELEMS,
) -> None:
    """The op a breakable graph runs eagerly: reads q, k, v (and sinks), writes ``out``.

    Uses nothing but its arguments. On CUDA, full causal attention goes to a flash /
    memory-efficient SDPA kernel, with sinks applied from the flash kernel's log-sum-exp
    where it has one (bf16/fp16); sliding windows, and every CPU case, go to the chunked
    online-softmax path, whose memory is bounded independently of T.
    """
    if q.is_cuda and window is None:
        if sinks is None:
            _sdpa_causal(q, k, v, out, scale=scale)
            return
        if _flash_lse_supported(q):
            _sdpa_causal_sinks(q, k, v, out, scale=scale, sinks=sinks)
            return
    _chunked_attention(q, k, v, out, scale=scale, window=window, sinks=sinks, block_q=block_q,
                       tile_elems=tile_elems)


def _expand_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """[T, H, D] -> [1, Hq, T, D] each, KV heads repeated to the query heads."""
    group = q.shape[1] // k.shape[1]
    qh = q.transpose(0, 1).unsqueeze(0)  # [1, Hq, T, D]
    kh = k.transpose(0, 1).repeat_interleave(group, dim=0).unsqueeze(0)  # [1, Hq, T, D]
    vh = v.transpose(0, 1).repeat_interleave(group, dim=0).unsqueeze(0)
    return qh, kh, vh


def _flash_lse_supported(q: torch.Tensor) -> bool:
    """Whether the flash kernel (which returns the log-sum-exp) takes these queries."""
    D = q.shape[-1]
    return (
        hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention")
        and q.dtype in (torch.bfloat16, torch.float16)
        and D % 8 == 0
        and D <= 256
    )


def _flash_causal_with_lse(qh, kh, vh, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal flash attention that also returns each row's log-sum-exp of the scaled
    scores: out [1, H, T, D], lse [1, H, T] float32. The public SDPA does not return
    the lse, so this calls the aten op SDPA itself dispatches to (CUDA or CPU)."""
    if qh.is_cuda:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(qh, kh, vh, 0.0, True, False, scale=scale)[:2]
    else:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(qh, kh, vh, 0.0, True, scale=scale)
    return out, lse


def _sdpa_causal_sinks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, scale: float, sinks: torch.Tensor
) -> None:
    """Full causal attention with sinks from one flash kernel call.

    A sink adds exp(sink_h) to each row's softmax denominator, so the result is the
    plain attention output times exp(lse) / (exp(lse) + exp(sink)) = sigmoid(lse - sink),
    lse the row's log-sum-exp. Memory: expanded K/V and the flash output (3 x T x Hq x D)
    and the lse (T x Hq floats); no score matrix.
    """
    qh, kh, vh = _expand_heads(q, k, v)
    o, lse = _flash_causal_with_lse(qh, kh, vh, scale)
    keep = torch.sigmoid(lse[0] - sinks.to(torch.float32)[:, None])  # [Hq, T] float32
    out.copy_(o[0].transpose(0, 1))  # [T, Hq, D]
    out.mul_(keep.t()[..., None])  # computed in float32, rounded once into out's dtype


def _sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, scale: float) -> None:
    """Causal SDPA with KV heads expanded to the query heads.

    ``enable_gqa=True`` sent 16k-token prefill to the math kernel (a full T x T score
    matrix, 64 GiB on the H200), so K and V are expanded explicitly (2 x T x Hq x D
    extra) and only the flash / memory-efficient kernels are allowed on CUDA.
    """
    qh, kh, vh = _expand_heads(q, k, v)
    if q.is_cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)
    else:
        o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)
    out.copy_(o[0].transpose(0, 1))  # [T, Hq, D]


def _chunked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    scale: float,
    window: int | None,
    sinks: torch.Tensor | None,
    block_q: int,
    tile_elems: int,
) -> None:
    """Causal (optionally windowed, optionally with sinks) attention by blocks.

    Flash-attention's online softmax written in PyTorch, device-agnostic. Queries go in
    blocks of ``block_q`` rows; for each, keys go in blocks of ``block_k`` columns, only
    over the range the block can see ([i - window + 1, i] for a window, [0, i]
    otherwise). Scores and probabilities are float32.

    Memory bound: besides float32 copies of K and V (2 x T x Hkv x D x 4 bytes, 32 MiB at
    16k tokens on gpt-oss-20b) and per-block accumulators (Hq x block_q x D), the live
    score tiles are a few [Hq, block_q, block_k] float32 tensors, with block_k chosen so
    one tile holds at most ``tile_elems`` elements: 64 MiB each by default (Hq = 64,
    block_q = block_k = 512), a few hundred MiB at most whatever T is. No T x T matrix.

    Sinks (gpt-oss): the softmax denominator gains exp(sink_h) per head, so the output is
    acc / (l + exp(sink - m)) with m the running row max and l the running row sum.
    """
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    G = Hq // Hkv
    block_q = max(1, min(block_q, T))
    block_k = max(1, min(T, tile_elems // (Hq * block_q)))
    kf = k.to(torch.float32).permute(1, 2, 0)  # [Hkv, D, T]
    vf = v.to(torch.float32).permute(1, 0, 2).contiguous()  # [Hkv, T, D]
    sink = None
    if sinks is not None:
        sink = sinks.to(torch.float32).view(Hkv, G, 1, 1)
    neg_inf = float("-inf")
    for qs in range(0, T, block_q):
        qe = min(qs + block_q, T)
        bq = qe - qs
        # [bq, Hq, D] -> [Hkv, G * bq, D]: query head h = kv * G + g reads KV head kv
        qf = q[qs:qe].to(torch.float32).view(bq, Hkv, G, D).permute(1, 2, 0, 3).reshape(Hkv, G * bq, D)
        qf = qf * scale  # scale the queries once instead of every score tile (never q in place)
        m = torch.full((Hkv, G * bq, 1), neg_inf, dtype=torch.float32, device=q.device)
        l = torch.zeros((Hkv, G * bq, 1), dtype=torch.float32, device=q.device)
        acc = torch.zeros((Hkv, G * bq, D), dtype=torch.float32, device=q.device)
        k_lo = 0 if window is None else max(0, qs - window + 1)
        for ks in range(k_lo, qe, block_k):
            ke = min(ks + block_k, qe)
            s = torch.bmm(qf, kf[:, :, ks:ke])  # [Hkv, G*bq, bk] scaled scores
            crosses_diagonal = ke - 1 > qs
            leaves_window = window is not None and ks <= qe - 1 - window
            if crosses_diagonal or leaves_window:
                qi = torch.arange(qs, qe, device=q.device)[:, None]
                kj = torch.arange(ks, ke, device=q.device)[None, :]
                blocked = kj > qi  # [bq, bk]
                if window is not None:
                    blocked |= kj <= qi - window
                s.view(Hkv, G, bq, ke - ks).masked_fill_(blocked, neg_inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            # a row that has seen only masked keys so far keeps m = -inf: shift by 0 instead
            m_safe = m_new.masked_fill(m_new == neg_inf, 0.0)
            p = s.sub_(m_safe).exp_()  # [Hkv, G*bq, bk], in place of the scores
            corr = torch.exp(m - m_safe)
            l = l * corr + p.sum(dim=-1, keepdim=True)
            acc = torch.baddbmm(acc * corr, p, vf[:, ks:ke])
            m = m_new
            del s, p
        if sink is not None:
            # every row saw its own diagonal key, so m is finite here
            extra = torch.exp(sink - m.view(Hkv, G, bq, 1)).view(Hkv, G * bq, 1)
            l = l + extra
        o = (acc / l).view(Hkv, G, bq, D).permute(2, 0, 1, 3).reshape(bq, Hq, D)
        out[qs:qe].copy_(o)


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Straightforward T x T attention in float32 (tests and small CPU checks only)."""
    T, Hq, D = q.shape
    G = Hq // k.shape[1]
    kk = k.float().repeat_interleave(G, dim=1)
    vv = v.float().repeat_interleave(G, dim=1)
    s = torch.einsum("thd,shd->hts", q.float(), kk) * scale  # [Hq, T, T]
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    blocked = j > i
    if window is not None:
        blocked |= j <= i - window
    s = s.masked_fill(blocked.to(s.device), float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.float().view(Hq, 1, 1).expand(Hq, T, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)[..., :T]
    return torch.einsum("hts,shd->thd", p, vv).to(q.dtype)


class Attention(nn.Module):
    """Self-attention with fused QKV: q/k/v projections (optional bias), optional
    per-head RMSNorm on q and k (Qwen3), RoPE, the attention core behind the break,
    output projection. Optional sinks (gpt-oss).

    Under tensor parallelism (``args.tp_size`` > 1) the module holds this rank's heads
    only: ``num_heads`` and ``num_kv_heads`` are the local counts, ``qkv_proj`` holds
    this rank's q, k and v rows, ``o_proj`` this rank's input columns, and the output
    is all-reduced over the ranks.
    """

    def __init__(self, args: ModelArgs, layer_idx: int, *, sinks: bool = False, norm_fp32_weight: bool = False):
        super().__init__()
        self.layer_idx = layer_idx
        self.tp_rank, self.tp_size = args.tp_rank, args.tp_size
        tp = self.tp_size
        # head counts derived here, once: the tensor-parallel split divides them
        self.total_heads, self.total_kv_heads = args.num_heads, args.num_kv_heads
        self.num_heads = args.num_heads // tp
        if args.num_kv_heads % tp == 0:
            self.num_kv_heads = args.num_kv_heads // tp
            self.kv_head_start = self.tp_rank * self.num_kv_heads
        else:  # fewer KV heads than ranks: keep the one this rank's query heads read
            self.num_kv_heads = 1
            self.kv_head_start = self.tp_rank // (tp // args.num_kv_heads)
        self.head_start = self.tp_rank * self.num_heads
        self.head_dim = args.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        self.window = args.window(layer_idx)
        self.qkv_proj = nn.Linear(args.hidden_size, self.q_size + 2 * self.kv_size, bias=args.attention_bias)
        self.o_proj = nn.Linear(self.q_size, args.hidden_size, bias=args.attention_bias)
        if args.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, args.rms_norm_eps, norm_fp32_weight)
            self.k_norm = RMSNorm(self.head_dim, args.rms_norm_eps, norm_fp32_weight)
        else:
            self.q_norm = self.k_norm = None
        self.sinks = nn.Parameter(torch.zeros(self.num_heads)) if sinks else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        T = x.shape[0]
        qkv = self.qkv_proj(x)  # [T, (Hq + 2 Hkv) D]  (this rank's heads)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(T, self.num_heads, self.head_dim)  # [T, Hq, D]
        k = k.view(T, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        v = v.view(T, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        o = attention(q, k, v.contiguous(), scale=self.scale, window=self.window, sinks=self.sinks)  # [T, Hq, D]
        return row_parallel_linear(o.view(T, self.q_size), self.o_proj, self.tp_rank, self.tp_size)  # [T, hidden]

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator["CheckpointTarget"]:
        H, q, kv, D = self.qkv_proj.in_features, self.q_size, self.kv_size, self.head_dim
        full_q, full_kv = self.total_heads * D, self.total_kv_heads * D
        q_src = slice(self.head_start * D, self.head_start * D + q)  # this rank's rows of q_proj
        kv_src = slice(self.kv_head_start * D, self.kv_head_start * D + kv)
        bias = self.qkv_proj.bias is not None
        for name, lo, n, full, src in (("q_proj", 0, q, full_q, q_src), ("k_proj", q, kv, full_kv, kv_src),
                                       ("v_proj", q + kv, kv, full_kv, kv_src)):
            src = src if self.tp_size > 1 else ()
            yield CheckpointTarget(f"{ckpt}.{name}.weight", f"{param}.qkv_proj.weight", (slice(lo, lo + n),),
                                   (full, H), src and (src,))
            if bias:
                yield CheckpointTarget(f"{ckpt}.{name}.bias", f"{param}.qkv_proj.bias", (slice(lo, lo + n),),
                                       (full,), src and (src,))
        cols = (slice(None), q_src) if self.tp_size > 1 else ()
        yield CheckpointTarget(f"{ckpt}.o_proj.weight", f"{param}.o_proj.weight", (), (H, full_q), cols)
        if self.o_proj.bias is not None:
            yield CheckpointTarget(f"{ckpt}.o_proj.bias", f"{param}.o_proj.bias", (), (H,))
        if self.q_norm is not None:
            for name in ("q_norm", "k_norm"):
                yield CheckpointTarget(f"{ckpt}.{name}.weight", f"{param}.{name}.weight", (), (self.head_dim,))
        if self.sinks is not None:
            heads = (slice(self.head_start, self.head_start + self.num_heads),) if self.tp_size > 1 else ()
            yield CheckpointTarget(f"{ckpt}.sinks", f"{param}.sinks", (), (self.total_heads,), heads)


# --------------------------------------------------------------------------- MLPs


class DenseMLP(nn.Module):
    """SwiGLU MLP with fused gate/up: down(silu(gate(x)) * up(x)).

    Under tensor parallelism gate_up holds this rank's 1/tp of the intermediate for both
    gate and up (column-parallel), down the matching input columns (row-parallel), and
    the output is all-reduced over the ranks.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False, *, tp_rank: int = 0,
                 tp_size: int = 1):
        super().__init__()
        if intermediate_size % tp_size:
            raise ModelConfigError(f"intermediate_size {intermediate_size} is not divisible by {tp_size} "
                                   "tensor-parallel ranks")
        self.hidden_size = hidden_size
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.total_intermediate_size = intermediate_size
        self.intermediate_size = intermediate_size // tp_size  # this rank's share
        I = self.intermediate_size
        self.gate_up_proj = nn.Linear(hidden_size, 2 * I, bias=bias)
        self.down_proj = nn.Linear(I, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # [T, I] each
        return row_parallel_linear(F.silu(gate) * up, self.down_proj, self.tp_rank, self.tp_size)  # [T, H]

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator["CheckpointTarget"]:
        H, I, full = self.hidden_size, self.intermediate_size, self.total_intermediate_size
        rows = shard_range(full, self.tp_rank, self.tp_size)
        src, cols = ((rows,), (slice(None), rows)) if self.tp_size > 1 else ((), ())
        bias = self.down_proj.bias is not None
        for name, lo in (("gate_proj", 0), ("up_proj", I)):
            yield CheckpointTarget(f"{ckpt}.{name}.weight", f"{param}.gate_up_proj.weight", (slice(lo, lo + I),),
                                   (full, H), src)
            if bias:
                yield CheckpointTarget(f"{ckpt}.{name}.bias", f"{param}.gate_up_proj.bias", (slice(lo, lo + I),),
                                       (full,), src)
        yield CheckpointTarget(f"{ckpt}.down_proj.weight", f"{param}.down_proj.weight", (), (H, full), cols)
        if bias:
            yield CheckpointTarget(f"{ckpt}.down_proj.bias", f"{param}.down_proj.bias", (), (H,))


def _grouped_mm_supported(x: torch.Tensor) -> bool:
    if not hasattr(torch, "_grouped_mm"):
        return False
    if x.device.type in ("cpu", "meta"):
        return True
    # the CUDA kernel (sm90+) takes bf16; other dtypes take the eager fallback
    return x.device.type == "cuda" and x.dtype == torch.bfloat16


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rows of ``x`` [M, K] sorted by group, times ``w`` [G, K, N] per group -> [M, N].

    ``offs`` [G] int32 holds each group's end row (cumulative counts). Uses
    ``torch._grouped_mm`` where it runs (CPU; CUDA in bf16), which is capturable and
    has a fused-MoE memory profile. Otherwise an eager loop over groups that reads the
    offsets on the host: correct, not capturable.
    """
    if _grouped_mm_supported(x):
        return torch._grouped_mm(x, w, offs=offs)
    out = x.new_empty(x.shape[0], w.shape[-1])
    ends = offs.tolist()
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            torch.mm(x[start:end], w[g], out=out[start:end])
        start = end
    return out


class RoutedExperts(NamedTuple):
    """A routing decision: per token, the chosen experts and their weights."""

    ids: torch.Tensor  # [T, k] int64
    weights: torch.Tensor  # [T, k]


def fused_moe(
    x: torch.Tensor,
    route: RoutedExperts,
    w1: torch.Tensor,
    w2: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor],
    b1: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
) -> torch.Tensor:
    """Token-choice MoE with the memory profile of a fused MoE kernel.

    x [T, H]; w1 [E, H, N1] and w2 [E, I, H] (views are fine; N1 is what ``activation``
    turns into I columns); optional biases b1 [E, N1], b2 [E, H].

    The T x k (token, slot) pairs are sorted by expert with a stable argsort, the
    per-expert row ends found with ``searchsorted`` (no bincount, no host sync), and
    both projections run as grouped GEMMs over the sorted rows. The combine un-sorts
    with a gather into [T, k, H], scales by the routing weights and sums over k: no
    ``index_add_``, so the result is deterministic and a graph replay equals an eager
    run bit for bit.

    Transients are O(T x k x max(H, N1)); nothing is O(T x E x anything).
    """
    T, H = x.shape
    k = route.ids.shape[1]
    E = w1.shape[0]
    flat = route.ids.reshape(-1)  # [T*k]
    order = torch.argsort(flat, stable=True)  # [T*k] sorted row -> (token, slot) index
    sorted_ids = flat[order]  # [T*k]
    offs = torch.searchsorted(sorted_ids, torch.arange(E, device=x.device), right=True).to(torch.int32)  # [E]
    xs = x[order // k]  # [T*k, H]
    h = grouped_mm(xs, w1, offs)  # [T*k, N1]
    del xs
    if b1 is not None:
        h += b1[sorted_ids]  # in place: one [T*k, N1] gather alive beside h, not two
    a = activation(h)  # [T*k, I]
    del h
    y = grouped_mm(a, w2, offs)  # [T*k, H]
    del a
    if b2 is not None:
        y += b2[sorted_ids]
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=x.device))
    y = y[inverse].view(T, k, H)  # [T, k, H] in (token, slot) order
    return (y * route.weights.to(y.dtype).unsqueeze(-1)).sum(dim=1)  # [T, H]


# --------------------------------------------------------------------------- the stack


class CheckpointTarget(NamedTuple):
    """Where one tensor of a published checkpoint goes: ``param[index] = tensor[source]``.

    ``shape`` is always the published (unsharded) shape; ``source`` picks this
    tensor-parallel rank's part of it (``()``: all of it).
    """

    name: str  # checkpoint name, e.g. model.layers.0.self_attn.q_proj.weight
    param: str  # our parameter, e.g. layers.0.self_attn.qkv_proj.weight
    index: tuple  # index into the parameter; () for all of it
    shape: tuple  # the checkpoint tensor's shape (dequantised layout), unsharded
    source: tuple = ()  # index into the checkpoint tensor: this rank's shard; () for all of it


_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


class DecoderModel(nn.Module):
    """A decoder-only layer stack: embedding, layers, final norm. No LM head.

    ``forward(input_ids [T], positions [T]) -> [T, hidden]`` (final-norm hidden states).
    Subclasses set ``family`` and implement ``make_layer``.

    The checkpoint API used by the loaders in :mod:`bcgprof.models.weights`:
    ``checkpoint_shapes``, ``ignores_checkpoint_name``, ``load_checkpoint_tensor``.
    """

    family: str = ""
    norm_fp32_weight: bool = False

    def __init__(self, config: dict, num_layers: int | None = None, tp_rank: int = 0, tp_size: int = 1):
        super().__init__()
        self.config = config
        self.args = ModelArgs.from_config(config, self.family, num_layers).shard(tp_rank, tp_size)
        self.tp_rank, self.tp_size = self.args.tp_rank, self.args.tp_size
        a = self.args
        self.num_layers = a.num_layers
        self.hidden_size = a.hidden_size
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList([self.make_layer(i) for i in range(a.num_layers)])
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps, self.norm_fp32_weight)
        # one rotary table per distinct RoPE description (usually one for all layers)
        specs: dict[str, dict] = {}
        self._rope_of_layer: list[str] = []
        for lt in a.layer_types:
            p = rope_parameters(config, lt, a.rope_theta_default)
            key = next((k for k, v in specs.items() if v == p), None)
            if key is None:
                key = f"r{len(specs)}"
                specs[key] = p
            self._rope_of_layer.append(key)
        self.rotary = nn.ModuleDict(
            {k: RotaryEmbedding(p, a.head_dim, a.max_position_embeddings) for k, p in specs.items()}
        )
        self._ckpt: dict[str, CheckpointTarget] | None = None

    def make_layer(self, layer_idx: int) -> nn.Module:
        raise NotImplementedError

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)  # [T, H] (the embedding is replicated on every rank)
        tables = {k: rope(positions) for k, rope in self.rotary.items()}  # each ([T, D/2], [T, D/2])
        for layer, key in zip(self.layers, self._rope_of_layer):
            cos, sin = tables[key]
            x = layer(x, cos, sin)
        return self.norm(x)  # [T, H]

    def reset_buffers(self) -> None:
        """Recompute derived buffers (RoPE); safe after any move, cast or weight init."""
        for rope in self.rotary.values():
            rope.reset_buffers()

    # -- checkpoint API -----------------------------------------------------------

    def checkpoint_targets(self) -> dict[str, CheckpointTarget]:
        if self._ckpt is None:
            targets = [
                CheckpointTarget("model.embed_tokens.weight", "embed_tokens.weight", (),
                                 (self.args.vocab_size, self.hidden_size)),
                CheckpointTarget("model.norm.weight", "norm.weight", (), (self.hidden_size,)),
            ]
            for i, layer in enumerate(self.layers):
                targets.extend(layer.checkpoint_entries(f"model.layers.{i}", f"layers.{i}"))
            self._ckpt = {t.name: t for t in targets}
        return self._ckpt

    def checkpoint_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor this stack needs from a published checkpoint of its family, with
        its shape in the dequantised layout (gpt-oss experts as transformers' bf16
        ``gate_up_proj`` [E, H, 2I] etc.). Layers >= num_layers and the LM head excluded."""
        return {name: tuple(t.shape) for name, t in self.checkpoint_targets().items()}

    def ignores_checkpoint_name(self, name: str) -> bool:
        """True for checkpoint tensors deliberately not loaded: the LM head, layers past
        the truncation, rotary inv_freq buffers some exports carry."""
        if name.startswith("lm_head.") or name.endswith("rotary_emb.inv_freq"):
            return True
        m = _LAYER.match(name)
        return m is not None and int(m.group(1)) >= self.num_layers

    def load_checkpoint_tensor(self, name: str, tensor: torch.Tensor) -> None:
        """Copy one checkpoint tensor into its place (a slice of a fused parameter where
        the stack fuses), converting dtype and device."""
        target = self.checkpoint_targets().get(name)
        if target is None:
            raise ModelConfigError(f"unexpected checkpoint tensor {name} for a {self.family} stack")
        if tuple(tensor.shape) != tuple(target.shape):
            raise ModelConfigError(
                f"checkpoint tensor {name} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}"
            )
        param = self.get_parameter(target.param)
        with torch.no_grad():
            param[target.index].copy_(tensor[target.source] if target.source else tensor)

    def checkpoint_tensor(self, name: str) -> torch.Tensor:
        """The published tensor ``name`` read back from this (unsharded) stack: the
        inverse of :meth:`load_checkpoint_tensor` (tests write checkpoints with it)."""
        if self.tp_size != 1:
            raise ModelConfigError("checkpoint_tensor reads whole published tensors: only from an unsharded stack")
        target = self.checkpoint_targets()[name]
        return self.get_parameter(target.param)[target.index].detach().reshape(target.shape)


class DecoderLayer(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then h + mlp(norm(h))."""

    def __init__(self, args: ModelArgs, layer_idx: int, attn: nn.Module, mlp: nn.Module, norm_fp32_weight: bool):
        super().__init__()
        self.layer_idx = layer_idx
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, norm_fp32_weight)
        self.self_attn = attn
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, norm_fp32_weight)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), cos, sin)  # [T, H]
        return h + self.mlp(self.post_attention_layernorm(h))  # [T, H]

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator[CheckpointTarget]:
        H = self.input_layernorm.weight.shape[0]
        for name in ("input_layernorm", "post_attention_layernorm"):
            yield CheckpointTarget(f"{ckpt}.{name}.weight", f"{param}.{name}.weight", (), (H,))
        yield from self.self_attn.checkpoint_entries(f"{ckpt}.self_attn", f"{param}.self_attn")
        yield from self.mlp.checkpoint_entries(f"{ckpt}.mlp", f"{param}.mlp")
