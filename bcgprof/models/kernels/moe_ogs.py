"""The MoE of SGLang's MXFP4 path for gpt-oss on Hopper (``--moe sglang-mxfp4``): the memory profile
of ``triton_kernel_fused_experts_with_bias`` over ``triton_kernels``' ``matmul_ogs``, in bcgprof's
own kernels.

``experts_ogs(x [T, H], routing, w1 [E, H, 2I], w2 [E, I, H], b1 [E, 2I] | None, b2 [E, H] | None)
-> [T, H]``, ``routing`` from :func:`~bcgprof.models.kernels.ogs_routing.ogs_routing`, computes per
token, with gpt-oss's clamped SwiGLU (gate and up interleaved in w1's columns, ``alpha``, ``limit``)

    out[t] = sum over slots s of w[t, s] * (swiglu(x[t] @ w1[e] + b1[e]) @ w2[e] + b2[e]),
    e = ids[t, s]

Memory and lifetime (the contract; shapes in :mod:`~bcgprof.models.kernels.ogs_workspace`):

1. ``intermediate`` [T*k, I], then ``output`` [T, H] (a new tensor: SGLang's path is out of place);
2. GEMM1 reads x's rows through the gather indices, adds b1 and applies the SwiGLU to its float32
   accumulators (matmul_ogs' fused activation), one rounding into ``intermediate``: the [T*k, 2I]
   projection never exists in memory;
3. ``scratch`` [T*k, H] (matmul_ogs' scratchpad when it scatters over k > 1 experts);
4. GEMM2 reads ``intermediate``, adds b2 and multiplies the routing weight in float32, one rounding
   into ``scratch``;
5. the sum over each token's k rows, in slot order, float32, one rounding, into ``output``;
   ``scratch`` is freed, then ``intermediate`` on return.

The peak is steps 4 and 5: intermediate + output + scratch, beside the routing the caller holds.
Rows are in expert-sorted order in both GEMM outputs. No atomics, no split-K: a CUDA-graph replay
equals an eager run bit for bit.

Paths: Triton for CUDA tensors; on the meta device the same allocations and no launch; elsewhere
:func:`experts_ogs_reference` (plain PyTorch, the same rounding points; it allocates the same three
tensors in the same order, plus float32 temporaries for its math). Tensor parallelism is the
caller's: a rank passes its shards (I/tp) and b2 only where it should be added.
"""

from __future__ import annotations

import torch

from bcgprof.models.kernels._backend import META, REFERENCE, choose
from bcgprof.models.kernels.moe import grouped_mm_f32
from bcgprof.models.kernels.ogs_routing import OgsRouting
from bcgprof.models.kernels.ogs_workspace import OgsWorkspace, ogs_workspace_shapes


def _check_routing(x: torch.Tensor, routing: OgsRouting, E: int) -> None:
    T = x.shape[0]
    if routing.gather_indx.shape[0] != T * routing.top_k or routing.num_experts != E:
        raise ValueError(
            f"routing is for {routing.gather_indx.shape[0]} rows over {routing.num_experts} "
            "experts; "
            f"x has {T} tokens of top-{routing.top_k} over {E} experts"
        )


def _check(x, routing, w1, w2, b1, b2) -> tuple[int, int, int, int]:
    if x.dim() != 2 or w1.dim() != 3 or w2.dim() != 3:
        raise ValueError("experts_ogs takes x [T, H], w1 [E, H, 2I], w2 [E, I, H]")
    T, H = x.shape
    E, _, N1 = w1.shape
    I = w2.shape[1]
    if tuple(w1.shape) != (E, H, N1) or tuple(w2.shape) != (E, I, H) or N1 != 2 * I:
        raise ValueError(
            f"shapes do not fit: x {tuple(x.shape)}, w1 {tuple(w1.shape)} (want [E, H, 2I]), "
            f"w2 {tuple(w2.shape)} (want [E, I, H])"
        )
    if w1.dtype != x.dtype or w2.dtype != x.dtype:
        raise ValueError(f"weights must have x's dtype {x.dtype}, got {w1.dtype} and {w2.dtype}")
    _check_biases(b1, b2, E, N1, H)
    _check_routing(x, routing, E)
    return T, H, I, E


def _check_biases(b1, b2, E: int, N1: int, H: int) -> None:
    if b1 is not None and tuple(b1.shape) != (E, N1):
        raise ValueError(f"b1 must be [E, 2I] = {(E, N1)}, got {tuple(b1.shape)}")
    if b2 is not None and tuple(b2.shape) != (E, H):
        raise ValueError(f"b2 must be [E, H] = {(E, H)}, got {tuple(b2.shape)}")


def _run(x, routing: OgsRouting, ws: OgsWorkspace, mode: str, w1, s1, w2, s2, b1, b2, alpha, limit):
    """Steps 1-5 of the module docstring (Triton or, on meta, allocations only)."""
    intermediate = x.new_empty(ws.intermediate)
    output = x.new_empty(ws.output)
    if mode == META:  # the same allocations and lifetimes, nothing launched
        scratch = x.new_empty(ws.scratch)
        del scratch
        return output
    if ws.rows == 0:
        return output.zero_()
    from bcgprof.models.kernels import _triton_moe_ogs as kernels

    kernels.gemm1_swiglu(
        x, w1, s1, b1, intermediate, routing, block_m=ws.block_m, alpha=alpha, limit=limit
    )
    scratch = x.new_empty(ws.scratch)
    kernels.gemm2(intermediate, w2, s2, b2, scratch, routing, block_m=ws.block_m)
    kernels.sum_rows(scratch, routing, output)
    del scratch  # freed inside matmul_ogs, before the intermediate
    return output


def experts_ogs(
    x: torch.Tensor,
    routing: OgsRouting,
    w1: torch.Tensor,
    w2: torch.Tensor,
    b1: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    alpha: float = 1.702,
    limit: float = 7.0,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """The routed experts with SGLang's MXFP4-path workspace (module docstring); returns a new
    [T, H] tensor of x's dtype. ``backend``: None (Triton on CUDA, reference elsewhere), "triton"
    or "reference"."""
    T, H, I, E = _check(x, routing, w1, w2, b1, b2)
    mode = choose(x.device, backend)
    if mode == REFERENCE:
        return experts_ogs_reference(x, routing, w1, w2, b1, b2, alpha, limit)
    ws = ogs_workspace_shapes(T, routing.top_k, H, I, E)
    return _run(x, routing, ws, mode, w1, None, w2, None, b1, b2, alpha, limit)


def experts_ogs_mxfp4(
    x: torch.Tensor,
    routing: OgsRouting,
    w1_blocks: torch.Tensor,
    w1_scales: torch.Tensor,
    w2_blocks: torch.Tensor,
    w2_scales: torch.Tensor,
    b1: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    alpha: float = 1.702,
    limit: float = 7.0,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """:func:`experts_ogs` with gpt-oss's experts as the checkpoint stores them (``w1_blocks``
    [E, 2I, H/32, 16], ``w1_scales`` [E, 2I, H/32], ``w2_blocks`` [E, H, I/32, 16], ``w2_scales``
    [E, H, I/32], uint8; :mod:`bcgprof.models.mxfp4`), decoded in registers inside the GEMMs, as
    SGLang runs gpt-oss's MXFP4 weights. The same allocations as :func:`experts_ogs`; the reference
    path dequantises the weights and runs :func:`experts_ogs_reference`."""
    from bcgprof.models.kernels.moe import check_mxfp4

    E, N1, I = check_mxfp4(x, w1_blocks, w1_scales, w2_blocks, w2_scales)
    T, H = x.shape
    _check_biases(b1, b2, E, N1, H)
    _check_routing(x, routing, E)
    mode = choose(x.device, backend)
    if mode == REFERENCE:
        from bcgprof.models.mxfp4 import dequantize_mxfp4

        w1 = dequantize_mxfp4(w1_blocks, w1_scales, dtype=x.dtype, device=x.device)  # [E, H, 2I]
        w2 = dequantize_mxfp4(w2_blocks, w2_scales, dtype=x.dtype, device=x.device)  # [E, I, H]
        return experts_ogs_reference(x, routing, w1, w2, b1, b2, alpha, limit)
    ws = ogs_workspace_shapes(T, routing.top_k, H, I, E)
    return _run(
        x, routing, ws, mode, w1_blocks, w1_scales, w2_blocks, w2_scales, b1, b2, alpha, limit
    )


def experts_ogs_reference(
    x: torch.Tensor,
    routing: OgsRouting,
    w1: torch.Tensor,
    w2: torch.Tensor,
    b1: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    alpha: float = 1.702,
    limit: float = 7.0,
) -> torch.Tensor:
    """Plain PyTorch :func:`experts_ogs`: the same math and rounding points (GEMM1 in float32 + b1,
    the SwiGLU on the float32 result, round; GEMM2 in float32 + b2, times the routing weight,
    round; float32 sum over k in slot order, round), and ``intermediate``, ``output`` and
    ``scratch`` allocated in the Triton path's order. Sync-free and deterministic; its float32
    temporaries make it a CPU path."""
    T, H, I, _E = _check(x, routing, w1, w2, b1, b2)
    k = routing.top_k
    intermediate = x.new_empty(T * k, I)
    output = x.new_empty(T, H)
    if T == 0:
        return output
    order = routing.gather_indx.long()  # sorted position -> row t*k+s
    offs = routing.token_offs_raw[1:]  # [E] end of each expert's rows
    sorted_e = torch.searchsorted(
        offs, torch.arange(T * k, dtype=offs.dtype, device=x.device), right=True
    )
    h = grouped_mm_f32(x[order // k], w1, sorted_e, offs)  # [T*k, 2I] float32
    if b1 is not None:
        h += b1.float()[sorted_e]
    gate, up = h[:, 0::2].clamp(max=limit), h[:, 1::2].clamp(min=-limit, max=limit)
    intermediate.copy_((up + 1) * (gate * torch.sigmoid(gate * alpha)))
    del h, gate, up
    scratch = x.new_empty(T * k, H)
    y = grouped_mm_f32(intermediate, w2, sorted_e, offs)  # [T*k, H] float32
    if b2 is not None:
        y += b2.float()[sorted_e]
    y *= routing.gate_scal.float()[:, None]
    scratch.copy_(y)
    del y
    rows = scratch[routing.scatter_indx.long()].view(T, k, H)  # each token's k rows, slot order
    acc = rows[:, 0].float()
    for s in range(1, k):
        acc += rows[:, s].float()
    return output.copy_(acc)
