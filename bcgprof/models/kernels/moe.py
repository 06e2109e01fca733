"""A fused MoE with the serving engines' memory profile (SGLang's and vLLM's Triton
``fused_experts``).

``fused_experts(x [T, H], topk_ids [T, k], topk_weights [T, k], w1 [E, H, N1], w2 [E, I, H],
activation, b1 [E, N1] | None, b2 [E, H] | None) -> [T, H]``, N1 = 2I, computes per token

    out[t] = sum over slots s of  w[t, s] * (act(x[t] @ w1[e] + b1[e]) @ w2[e] + b2[e]),  e = ids[t,
    s]

Memory and lifetime (the contract; shapes in :mod:`~bcgprof.models.kernels.workspace`):

1. routing metadata (sorted_ids, expert_ids, num_tokens_post_padded), built on the device;
   its int64 temporaries are freed before step 2;
2. ``cache13`` [T*k * max(N1, H)], ``output`` [T, H], ``cache2`` [T*k, I], in that order;
3. GEMM1 reads x rows through sorted_ids (no gathered copy of x) and writes
   ``cache13[:T*k*N1]`` as [T*k, N1] in (token, slot) row order, b1 added in float32
   before the one rounding;
4. the activation reads that view and writes ``cache2``;
5. GEMM2 reads ``cache2`` and writes ``cache13[:T*k*H]`` as [T*k, H] (over GEMM1's output,
   which is dead by then), b2 added and the routing weight multiplied in float32 before
   the one rounding;
6. the sum over k, in slot order, in float32, one rounding, into ``output``.

Everything of step 1 and 2 is alive together from step 3 to the end (that is the peak);
on return only ``output`` survives. ``out=`` replaces the ``output`` allocation by a
tensor of the caller's; ``out=x`` is SGLang's default ``inplace=True`` (x is read by
GEMM1 and only written by the final sum, in stream order, so this is safe).

No atomics, no split-K: the result is the same bits every run, and a CUDA-graph replay
equals an eager run.

Paths: Triton for CUDA tensors; on the meta device the same allocations and no launch;
elsewhere :func:`fused_experts_reference` (plain PyTorch, same rounding points, allocates
what it needs). Tensor parallelism is the caller's business: a rank passes its own shards
(I/tp intermediate columns) and b2 only where it should be added.
"""

from __future__ import annotations

import torch

from bcgprof.models.kernels._backend import META, REFERENCE, choose
from bcgprof.models.kernels.activation import (
    clamped_swiglu,
    clamped_swiglu_reference,
    silu_and_mul,
    silu_and_mul_reference,
)
from bcgprof.models.kernels.routing import align_routing
from bcgprof.models.kernels.workspace import moe_workspace_shapes

ACTIVATIONS = ("silu", "clamped_swiglu")


def _empty(like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    # one place for the workspace allocations (tests poison them through it)
    return like.new_empty(shape)


def _check(
    x, topk_ids, topk_weights, w1, w2, activation, b1, b2
) -> tuple[int, int, int, int, int, int]:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if x.dim() != 2 or w1.dim() != 3 or w2.dim() != 3:
        raise ValueError("fused_experts takes x [T, H], w1 [E, H, N1], w2 [E, I, H]")
    T, H = x.shape
    E, _, N1 = w1.shape
    I = w2.shape[1]
    if tuple(w1.shape) != (E, H, N1) or tuple(w2.shape) != (E, I, H) or N1 != 2 * I:
        raise ValueError(
            f"shapes do not fit: x {tuple(x.shape)}, w1 {tuple(w1.shape)} (want [E, H, 2I]), "
            f"w2 {tuple(w2.shape)} (want [E, I, H])"
        )
    if (
        topk_ids.dim() != 2
        or topk_ids.shape[0] != T
        or tuple(topk_weights.shape) != tuple(topk_ids.shape)
    ):
        raise ValueError(
            f"topk_ids and topk_weights must both be [T={T}, k], got {tuple(topk_ids.shape)} "
            f"and {tuple(topk_weights.shape)}"
        )
    if topk_ids.dtype.is_floating_point or topk_ids.dtype == torch.bool:
        raise ValueError(f"topk_ids must be an integer tensor, got {topk_ids.dtype}")
    if w1.dtype != x.dtype or w2.dtype != x.dtype:
        raise ValueError(f"weights must have x's dtype {x.dtype}, got {w1.dtype} and {w2.dtype}")
    if b1 is not None and tuple(b1.shape) != (E, N1):
        raise ValueError(f"b1 must be [E, N1] = {(E, N1)}, got {tuple(b1.shape)}")
    if b2 is not None and tuple(b2.shape) != (E, H):
        raise ValueError(f"b2 must be [E, H] = {(E, H)}, got {tuple(b2.shape)}")
    return T, H, N1, I, E, topk_ids.shape[1]


def fused_experts(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    activation: str = "silu",
    b1: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    alpha: float = 1.702,
    limit: float = 7.0,
    *,
    out: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Token-choice MoE over the routed experts, engine-faithful in memory (module docstring).

    x [T, H]; topk_ids [T, k] int; topk_weights [T, k] float; w1 [E, H, N1] and
    w2 [E, I, H] with any strides (transposed views work); ``activation`` "silu" (gate =
    first half of N1, up = second) or "clamped_swiglu" (gpt-oss: gate 0::2, up 1::2, with
    ``alpha`` and ``limit``); optional biases b1 [E, N1], b2 [E, H]. Returns a new [T, H]
    tensor of x's dtype, or ``out`` (a contiguous [T, H] tensor of x's dtype; may be x
    itself) written in place. ``backend``: None (Triton on CUDA, reference elsewhere),
    "triton" or "reference".
    """
    T, H, N1, I, E, k = _check(x, topk_ids, topk_weights, w1, w2, activation, b1, b2)
    if out is not None and (
        tuple(out.shape) != (T, H)
        or out.dtype != x.dtype
        or out.device != x.device
        or not out.is_contiguous()
    ):
        raise ValueError(
            f"out must be a contiguous {x.dtype} tensor of shape {(T, H)} on {x.device}"
        )
    mode = choose(x.device, backend)
    if mode == REFERENCE:
        y = fused_experts_reference(
            x, topk_ids, topk_weights, w1, w2, activation, b1, b2, alpha, limit
        )
        return y if out is None else out.copy_(y)
    ws = moe_workspace_shapes(T, k, H, N1, I, E)
    if T == 0 or k == 0:
        return x.new_zeros(T, H) if out is None else out.zero_()
    routing = align_routing(topk_ids, ws)  # its temporaries die here, before the caches
    cache13 = _empty(x, ws.cache13)
    if out is None:
        out = _empty(x, ws.output)
    cache2 = _empty(x, ws.cache2)
    cache1 = cache13[: ws.rows * N1].view(ws.rows, N1)  # [T*k, N1]
    cache3 = cache13[: ws.rows * H].view(ws.rows, H)  # [T*k, H], over cache1
    if mode == META:
        return out
    from bcgprof.models.kernels import _triton_moe

    _triton_moe.gemm(x, w1, b1, cache1, routing, a_row_div=k, block_m=ws.block_m)
    if activation == "silu":
        silu_and_mul(cache1, out=cache2, backend="triton")
    else:
        clamped_swiglu(cache1, alpha, limit, out=cache2, backend="triton")
    weights = topk_weights.reshape(-1)  # [T*k]
    if not weights.is_contiguous():
        weights = weights.contiguous()
    _triton_moe.gemm(
        cache2, w2, b2, cache3, routing, a_row_div=1, block_m=ws.block_m, weights=weights
    )
    _triton_moe.moe_sum(cache3.view(T, k, H), out)
    return out


# --------------------------------------------------------------------------- MXFP4 weights


def check_mxfp4(x, w1_blocks, w1_scales, w2_blocks, w2_scales) -> tuple[int, int, int]:
    """(E, N1, I) of packed expert weights, or one ValueError line."""
    from bcgprof.models import mxfp4

    if x.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"MXFP4 experts run with bfloat16 or float32 activations, got {x.dtype}")
    for name, t in (
        ("w1_blocks", w1_blocks),
        ("w1_scales", w1_scales),
        ("w2_blocks", w2_blocks),
        ("w2_scales", w2_scales),
    ):
        if t.dtype != torch.uint8:
            raise ValueError(f"{name} must be uint8, got {t.dtype}")
    E, N1, H = mxfp4.packed_dims(w1_blocks.shape, w1_scales.shape)
    E2, H2, I = mxfp4.packed_dims(w2_blocks.shape, w2_scales.shape)
    if E2 != E or x.shape[-1] != H2 or x.shape[-1] != H or N1 != 2 * I:
        raise ValueError(
            f"packed shapes do not fit x {tuple(x.shape)}: w1_blocks {tuple(w1_blocks.shape)} "
            f"(want [E, 2I, H/32, 16]), w2_blocks {tuple(w2_blocks.shape)} (want [E, H, I/32, 16])"
        )
    return E, N1, I


def fused_experts_mxfp4(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w1_blocks: torch.Tensor,
    w1_scales: torch.Tensor,
    w2_blocks: torch.Tensor,
    w2_scales: torch.Tensor,
    activation: str = "clamped_swiglu",
    b1: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    alpha: float = 1.702,
    limit: float = 7.0,
    *,
    out: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """:func:`fused_experts` with the expert weights kept as a gpt-oss checkpoint stores them:
    ``w1_blocks`` [E, N1, H/32, 16] and ``w1_scales`` [E, N1, H/32] (gate_up_proj's, gate and up
    interleaved in its rows as in the bf16 layout's columns), ``w2_blocks`` [E, H, I/32, 16] and
    ``w2_scales`` [E, H, I/32] (down_proj's); uint8, :mod:`bcgprof.models.mxfp4` describes the
    format. Equals ``fused_experts`` on the weights :func:`~bcgprof.models.mxfp4.dequantize_mxfp4`
    gives (exact in bfloat16), up to the order of the float32 sums.

    Memory: the Triton path decodes the weights in registers, inside the GEMMs; no dequantised
    copy of a weight exists at any time. Its allocations are exactly those of ``fused_experts``
    for the same (T, k, H, I, E), in the same order, shapes and dtypes (nothing of the
    workspace depends on the weights' format):

    * routing metadata: sorted_ids ``4 * P`` bytes with P = T*k + E*(BM-1) (at most T*k*BM
      when T*k < E), expert_ids ``4 * cdiv(P, BM)``, num_tokens_post_padded 4;
    * cache13 ``T*k * max(2I, H) * s`` bytes (s the activations' element size, 2 for bf16);
    * output ``T * H * s`` (none with ``out=``);
    * cache2 ``T*k * I * s``.

    What differs is outside the workspace: the weights the GEMMs read (``E * N * K * 17/32``
    bytes a projection instead of ``2 * E * N * K``). The reference path (CPU) dequantises the
    weights and runs :func:`fused_experts_reference`, allocating freely.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    E, N1, I = check_mxfp4(x, w1_blocks, w1_scales, w2_blocks, w2_scales)
    T, H = x.shape
    mode = choose(x.device, backend)
    if mode == REFERENCE:
        from bcgprof.models.mxfp4 import dequantize_mxfp4

        w1 = dequantize_mxfp4(w1_blocks, w1_scales, dtype=x.dtype, device=x.device)  # [E, H, N1]
        w2 = dequantize_mxfp4(w2_blocks, w2_scales, dtype=x.dtype, device=x.device)  # [E, I, H]
        y = fused_experts_reference(
            x, topk_ids, topk_weights, w1, w2, activation, b1, b2, alpha, limit
        )
        return y if out is None else out.copy_(y)
    if (
        topk_ids.dim() != 2
        or topk_ids.shape[0] != T
        or tuple(topk_weights.shape) != tuple(topk_ids.shape)
    ):
        raise ValueError(
            f"topk_ids and topk_weights must both be [T={T}, k], got {tuple(topk_ids.shape)} "
            f"and {tuple(topk_weights.shape)}"
        )
    if out is not None and (
        tuple(out.shape) != (T, H)
        or out.dtype != x.dtype
        or out.device != x.device
        or not out.is_contiguous()
    ):
        raise ValueError(
            f"out must be a contiguous {x.dtype} tensor of shape {(T, H)} on {x.device}"
        )
    k = topk_ids.shape[1]
    ws = moe_workspace_shapes(T, k, H, N1, I, E)
    if T == 0 or k == 0:
        return x.new_zeros(T, H) if out is None else out.zero_()
    routing = align_routing(topk_ids, ws)
    cache13 = _empty(x, ws.cache13)
    if out is None:
        out = _empty(x, ws.output)
    cache2 = _empty(x, ws.cache2)
    cache1 = cache13[: ws.rows * N1].view(ws.rows, N1)  # [T*k, N1]
    cache3 = cache13[: ws.rows * H].view(ws.rows, H)  # [T*k, H], over cache1
    if mode == META:
        return out
    from bcgprof.models.kernels import _triton_moe

    _triton_moe.gemm_mxfp4(
        x, w1_blocks, w1_scales, b1, cache1, routing, a_row_div=k, block_m=ws.block_m
    )
    if activation == "silu":
        silu_and_mul(cache1, out=cache2, backend="triton")
    else:
        clamped_swiglu(cache1, alpha, limit, out=cache2, backend="triton")
    weights = topk_weights.reshape(-1)  # [T*k]
    if not weights.is_contiguous():
        weights = weights.contiguous()
    _triton_moe.gemm_mxfp4(
        cache2,
        w2_blocks,
        w2_scales,
        b2,
        cache3,
        routing,
        a_row_div=1,
        block_m=ws.block_m,
        weights=weights,
    )
    _triton_moe.moe_sum(cache3.view(T, k, H), out)
    return out


# --------------------------------------------------------------------------- reference


def grouped_mm_f32(
    a: torch.Tensor, w: torch.Tensor, sorted_e: torch.Tensor, offs: torch.Tensor
) -> torch.Tensor:
    """[M, K] rows grouped by expert (``sorted_e`` [M], ends ``offs`` [E]) times w [E, K, N],
    accumulated in float32 -> float32 [M, N]. No host synchronisation."""
    a32, w32 = a.float(), w.float()
    E, K, N = w.shape
    if a.device.type == "cpu" and hasattr(torch, "_grouped_mm") and K % 4 == 0 and N % 4 == 0:
        # CPU grouped GEMM wants 16-byte strides
        return torch._grouped_mm(a32.contiguous(), w32.contiguous(), offs=offs)
    out = a32.new_zeros(a.shape[0], N)
    for e in range(E):  # any size, any device: every expert over every row, kept where it routes
        out = torch.where((sorted_e == e)[:, None], a32 @ w32[e], out)
    return out


def fused_experts_reference(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    activation: str = "silu",
    b1: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    alpha: float = 1.702,
    limit: float = 7.0,
) -> torch.Tensor:
    """Plain PyTorch :func:`fused_experts`: the same math and rounding points (GEMM1 in
    float32 + b1, round; activation in float32, round; GEMM2 in float32 + b2, times the
    routing weight, round; float32 sum over k in slot order, round). Sync-free and
    deterministic, but it allocates freely (float32 copies, a gathered x): for CPU use."""
    T, H, _N1, _I, E, k = _check(x, topk_ids, topk_weights, w1, w2, activation, b1, b2)
    if T == 0 or k == 0:
        return x.new_zeros(T, H)
    flat = topk_ids.reshape(-1).long()  # [T*k]
    order = torch.argsort(flat, stable=True)  # [T*k] sorted position -> row t*k+s
    sorted_e = flat[order]
    # [E]
    offs = torch.searchsorted(sorted_e, torch.arange(E, device=x.device), right=True).to(
        torch.int32
    )
    h = grouped_mm_f32(x[order // k], w1, sorted_e, offs)  # [T*k, N1] float32
    if b1 is not None:
        h += b1.float()[sorted_e]
    h = h.to(x.dtype)
    if activation == "silu":
        a = silu_and_mul_reference(h)  # [T*k, I]
    else:
        a = clamped_swiglu_reference(h, alpha, limit)
    y = grouped_mm_f32(a, w2, sorted_e, offs)  # [T*k, H] float32
    if b2 is not None:
        y += b2.float()[sorted_e]
    y *= topk_weights.reshape(-1).float()[order][:, None]
    y = y.to(x.dtype)
    rows = torch.empty_like(y)
    rows[order] = y  # back to (token, slot) order; each row written once
    rows = rows.view(T, k, H)
    acc = rows[:, 0].float()
    for s in range(1, k):  # slot order, as the kernel sums
        acc += rows[:, s].float()
    return acc.to(x.dtype)
