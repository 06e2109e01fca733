"""Triton kernels of the outer-gather/scatter MoE (:mod:`bcgprof.models.kernels.moe_ogs`), imported
only when its Triton path runs: GEMM1 with gpt-oss's clamped SwiGLU in its epilogue, GEMM2 with the
bias and the routing weight in its epilogue, and the sum over each token's k rows.

Tiles come from the routing's block map (:mod:`~bcgprof.models.kernels.ogs_routing`): a program
takes one tile (BLOCK_M consecutive expert-sorted rows of one expert) and one block of columns; a
tile past the last expert's rows returns at once (the grid is the static bound ``max_tiles``). Both
GEMMs write their rows in expert-sorted order, as ``matmul_ogs`` does; GEMM1 reads x through the
gather indices (no gathered copy of x). Weights are bf16-layout ``[E, K, N]`` tensors of any
strides, or MXFP4 blocks ``[E, N, K/32, 16]`` and scales ``[E, N, K/32]`` decoded in registers.
Each K step multiplies the even and the odd rows of the weight tile in two dots.

Determinism: every output element is computed by one program, with a K loop in a fixed order, no
atomics and no split-K; launch configurations come from a fixed table (no autotuning).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from bcgprof.models.kernels._backend import interpreting
from bcgprof.models.kernels._triton_activation import bf16_rne, soft_bf16
from bcgprof.models.kernels._triton_moe import mxfp4_to_float
from bcgprof.models.kernels.ogs_routing import OgsRouting
from bcgprof.models.kernels.ogs_workspace import max_tiles


@triton.jit
def _tile_rows(pid_map_ptr, offs_raw_ptr, pid_m, BLOCK_M: tl.constexpr):
    """(expert, sorted rows [BLOCK_M], which of them exist) of tile ``pid_m``; expert -1: none."""
    code = tl.load(pid_map_ptr + pid_m)
    expert = tl.where(code == -1, -1, code & 0xFFFF)
    start = tl.load(offs_raw_ptr + tl.maximum(expert, 0))
    end = tl.load(offs_raw_ptr + tl.maximum(expert, 0) + 1)
    rows = start + (code >> 16) * BLOCK_M + tl.arange(0, BLOCK_M)
    return expert.to(tl.int64), rows.to(tl.int64), rows < end


@triton.jit
def _weight_rows(
    w_ptr,
    s_ptr,
    expert,
    cols,
    k0,
    h,
    K,
    stride_we,
    stride_wk,
    stride_wn,
    stride_se,
    stride_sn,
    stride_sg,
    MXFP4: tl.constexpr,
):
    """W[expert][k0 + 2h, cols] and W[expert][k0 + 2h + 1, cols] for h in [0, BLOCK_K / 2): the even
    and the odd rows of one K step, [BLOCK_K / 2, BLOCK_N] each (float32, exact, when MXFP4)."""
    even_ok = (k0 + 2 * h) < K
    if MXFP4:  # byte k // 2 of row n holds codes k (low nibble) and k + 1; one scale per 32 k
        packed = tl.load(
            w_ptr + expert * stride_we + cols[None, :] * stride_wn + (k0 // 2 + h)[:, None],
            mask=even_ok[:, None],
            other=0,
        ).to(tl.int32)
        scale = tl.load(
            s_ptr
            + expert * stride_se
            + cols[None, :] * stride_sn
            + ((k0 + 2 * h) // 32)[:, None] * stride_sg,
            mask=even_ok[:, None],
            other=0,
        ).to(tl.int32)
        return mxfp4_to_float(packed & 0xF, scale), mxfp4_to_float(packed >> 4, scale)
    else:
        ptrs = (
            w_ptr
            + expert * stride_we
            + (k0 + 2 * h)[:, None] * stride_wk
            + cols[None, :] * stride_wn
        )
        odd_ok = (k0 + 2 * h + 1) < K
        return (
            tl.load(ptrs, mask=even_ok[:, None], other=0.0),
            tl.load(ptrs + stride_wk, mask=odd_ok[:, None], other=0.0),
        )


@triton.jit
def _mma(a, w, acc, UPCAST: tl.constexpr):
    """acc + a @ w, float32 accumulation (IEEE float32 products when UPCAST)."""
    if UPCAST:  # float32 inputs (no TF32), and the interpreter
        return tl.dot(a.to(tl.float32), w.to(tl.float32), acc=acc, input_precision="ieee")
    return tl.dot(a, w.to(a.dtype), acc=acc)


@triton.jit
def _gemm1_swiglu_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    bias_ptr,
    y_ptr,
    gather_ptr,
    offs_raw_ptr,
    pid_map_ptr,
    I,
    K,
    alpha,
    limit,
    stride_xm,
    stride_xk,
    stride_we,
    stride_wk,
    stride_wn,
    stride_se,
    stride_sn,
    stride_sg,
    stride_bias_e,
    stride_bias_n,
    stride_ym,
    TOP_K: tl.constexpr,
    MXFP4: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    UPCAST: tl.constexpr,
    SOFT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """y[p, j] = swiglu(x[t] @ W[e][:, 2j] + b[e, 2j], x[t] @ W[e][:, 2j+1] + b[e, 2j+1]),
    t = gather[p] // TOP_K:
    the gate (even) and up (odd) columns in two float32 accumulators, bias added, the clamped
    SwiGLU applied to them, one rounding into y [T*k, I]."""
    expert, rows, row_ok = _tile_rows(pid_map_ptr, offs_raw_ptr, tl.program_id(0), BLOCK_M)
    if expert < 0:
        return
    tokens = tl.load(gather_ptr + rows, mask=row_ok, other=0).to(tl.int64) // TOP_K
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # output columns j
    wcols = cols % I  # in-bounds loads; the store masks the extra columns
    h = tl.arange(0, BLOCK_K // 2)
    a_ptrs = x_ptr + tokens[:, None] * stride_xm + (2 * h)[None, :] * stride_xk
    acc_gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        even_ok = (k0 + 2 * h) < K
        odd_ok = (k0 + 2 * h + 1) < K
        a_even = tl.load(
            a_ptrs + k0 * stride_xk, mask=row_ok[:, None] & even_ok[None, :], other=0.0
        )
        a_odd = tl.load(
            a_ptrs + (k0 + 1) * stride_xk, mask=row_ok[:, None] & odd_ok[None, :], other=0.0
        )
        g_even, g_odd = _weight_rows(
            w_ptr,
            s_ptr,
            expert,
            2 * wcols,
            k0,
            h,
            K,
            stride_we,
            stride_wk,
            stride_wn,
            stride_se,
            stride_sn,
            stride_sg,
            MXFP4,
        )
        acc_gate = _mma(a_odd, g_odd, _mma(a_even, g_even, acc_gate, UPCAST), UPCAST)
        u_even, u_odd = _weight_rows(
            w_ptr,
            s_ptr,
            expert,
            2 * wcols + 1,
            k0,
            h,
            K,
            stride_we,
            stride_wk,
            stride_wn,
            stride_se,
            stride_sn,
            stride_sg,
            MXFP4,
        )
        acc_up = _mma(a_odd, u_odd, _mma(a_even, u_even, acc_up, UPCAST), UPCAST)
    if HAS_BIAS:
        b_ptrs = bias_ptr + expert * stride_bias_e + (2 * wcols) * stride_bias_n
        acc_gate += tl.load(b_ptrs).to(tl.float32)[None, :]
        acc_up += tl.load(b_ptrs + stride_bias_n).to(tl.float32)[None, :]
    gate = tl.minimum(acc_gate, limit)
    up = tl.minimum(tl.maximum(acc_up, -limit), limit)
    y = (up + 1.0) * (gate * tl.sigmoid(gate * alpha))
    if SOFT_BF16:
        y = bf16_rne(y)
    tl.store(
        y_ptr + rows[:, None] * stride_ym + cols[None, :],
        y.to(y_ptr.dtype.element_ty),
        mask=row_ok[:, None] & (cols < I)[None, :],
    )


@triton.jit
def _gemm2_kernel(
    a_ptr,
    w_ptr,
    s_ptr,
    bias_ptr,
    c_ptr,
    gamma_ptr,
    offs_raw_ptr,
    pid_map_ptr,
    N,
    K,
    stride_am,
    stride_ak,
    stride_we,
    stride_wk,
    stride_wn,
    stride_se,
    stride_sn,
    stride_sg,
    stride_bias_e,
    stride_bias_n,
    stride_cm,
    MXFP4: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    UPCAST: tl.constexpr,
    SOFT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """c[p] = (a[p] @ W[e] + b[e]) * gamma[p], float32, one rounding: rows p in sorted order."""
    expert, rows, row_ok = _tile_rows(pid_map_ptr, offs_raw_ptr, tl.program_id(0), BLOCK_M)
    if expert < 0:
        return
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    wcols = cols % N
    h = tl.arange(0, BLOCK_K // 2)
    a_ptrs = a_ptr + rows[:, None] * stride_am + (2 * h)[None, :] * stride_ak
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        even_ok = (k0 + 2 * h) < K
        odd_ok = (k0 + 2 * h + 1) < K
        a_even = tl.load(
            a_ptrs + k0 * stride_ak, mask=row_ok[:, None] & even_ok[None, :], other=0.0
        )
        a_odd = tl.load(
            a_ptrs + (k0 + 1) * stride_ak, mask=row_ok[:, None] & odd_ok[None, :], other=0.0
        )
        w_even, w_odd = _weight_rows(
            w_ptr,
            s_ptr,
            expert,
            wcols,
            k0,
            h,
            K,
            stride_we,
            stride_wk,
            stride_wn,
            stride_se,
            stride_sn,
            stride_sg,
            MXFP4,
        )
        acc = _mma(a_odd, w_odd, _mma(a_even, w_even, acc, UPCAST), UPCAST)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + expert * stride_bias_e + wcols * stride_bias_n).to(tl.float32)[
            None, :
        ]
    acc *= tl.load(gamma_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)[:, None]
    if SOFT_BF16:
        acc = bf16_rne(acc)
    tl.store(
        c_ptr + rows[:, None] * stride_cm + cols[None, :],
        acc.to(c_ptr.dtype.element_ty),
        mask=row_ok[:, None] & (cols < N)[None, :],
    )


@triton.jit
def _sum_rows_kernel(
    c_ptr,
    scatter_ptr,
    out_ptr,
    T,
    H,
    stride_cm,
    stride_om,
    TOP_K: tl.constexpr,
    SOFT_BF16: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """out[t] = sum over s = 0..k-1, in that order, of c[scatter[t*k + s]]; float32, one rounding"""
    t = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    t_ok = t < T
    mask = t_ok[:, None] & (cols < H)[None, :]
    acc = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
    for s in tl.static_range(TOP_K):
        src = tl.load(scatter_ptr + t * TOP_K + s, mask=t_ok, other=0).to(tl.int64)
        acc += tl.load(c_ptr + src[:, None] * stride_cm + cols[None, :], mask=mask, other=0.0).to(
            tl.float32
        )
    if SOFT_BF16:
        acc = bf16_rne(acc)
    tl.store(
        out_ptr + t[:, None] * stride_om + cols[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


@dataclass(frozen=True)
class TileConfig:
    BLOCK_N: int  # output columns per program
    BLOCK_K: int
    num_warps: int
    num_stages: int


# BLOCK_M -> configuration for 16-bit inputs on Hopper-class GPUs (GEMM1's BLOCK_N output columns
# read twice as many weight columns); a smaller one when a launch runs out of resources
_CONFIGS = {
    16: TileConfig(64, 64, 4, 3),
    32: TileConfig(64, 64, 4, 3),
    64: TileConfig(128, 64, 4, 3),
    128: TileConfig(128, 64, 8, 3),
}
_SMALL = dict(BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=2)
_too_big: set[tuple] = set()


def tile_config(block_m: int, dtype: torch.dtype) -> TileConfig:
    """The fixed launch configuration for tiles of ``block_m`` rows of ``dtype``."""
    cfg = _CONFIGS[block_m]
    if dtype == torch.float32:  # no tensor cores: small tiles, two stages
        cfg = replace(cfg, BLOCK_N=min(cfg.BLOCK_N, 64), BLOCK_K=32, num_warps=4, num_stages=2)
    return cfg


def _launch(key: tuple, block_m: int, dtype: torch.dtype, run) -> None:
    cfg = tile_config(block_m, dtype)
    if key in _too_big:
        cfg = replace(cfg, **_SMALL)
    try:
        run(cfg)
    except OutOfResources:  # raised at the first (compiling) launch, before any work
        _too_big.add(key)
        run(replace(cfg, **_SMALL))


def _weight_args(w: torch.Tensor, scales: torch.Tensor | None) -> tuple:
    """(weights, scales, six strides) of bf16-layout [E, K, N] weights or MXFP4 [E, N, K/32, 16]."""
    if scales is None:
        return (w, w, w.stride(0), w.stride(1), w.stride(2), 0, 0, 0)
    if w.stride(-1) != 1 or w.stride(-2) != 16:
        raise ValueError(
            f"MXFP4 blocks must hold each row's bytes contiguously, got strides {w.stride()}"
        )
    return (
        w,
        scales,
        w.stride(0),
        1,
        w.stride(1),
        scales.stride(0),
        scales.stride(1),
        scales.stride(2),
    )


def gemm1_swiglu(
    x: torch.Tensor,
    w: torch.Tensor,
    scales: torch.Tensor | None,
    bias: torch.Tensor | None,
    y: torch.Tensor,
    routing: OgsRouting,
    *,
    block_m: int,
    alpha: float,
    limit: float,
) -> None:
    """y [T*k, I] (sorted rows) = clamped SwiGLU of x's routed rows times the experts' gate/up
    weights (bf16 layout [E, H, 2I], or MXFP4 blocks [E, 2I, H/32, 16] with ``scales``) + bias."""
    rows, I = y.shape
    K = x.shape[1]
    if rows == 0 or I == 0:
        return
    tiles = max_tiles(routing.num_experts, rows, block_m)
    w, s, *w_strides = _weight_args(w, scales)

    def run(cfg: TileConfig) -> None:
        _gemm1_swiglu_kernel[(tiles, triton.cdiv(I, cfg.BLOCK_N))](
            x,
            w,
            s,
            bias if bias is not None else y,
            y,
            routing.gather_indx,
            routing.token_offs_raw,
            routing.tile_map(block_m),
            I,
            K,
            float(alpha),
            float(limit),
            x.stride(0),
            x.stride(1),
            *w_strides,
            bias.stride(0) if bias is not None else 0,
            bias.stride(1) if bias is not None else 0,
            y.stride(0),
            TOP_K=routing.top_k,
            MXFP4=scales is not None,
            HAS_BIAS=bias is not None,
            UPCAST=x.dtype == torch.float32 or interpreting(),
            SOFT_BF16=soft_bf16(y.dtype),
            BLOCK_M=block_m,
            BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )

    _launch(("gemm1", scales is not None, block_m, x.dtype, I, K), block_m, x.dtype, run)


def gemm2(
    a: torch.Tensor,
    w: torch.Tensor,
    scales: torch.Tensor | None,
    bias: torch.Tensor | None,
    c: torch.Tensor,
    routing: OgsRouting,
    *,
    block_m: int,
) -> None:
    """c [T*k, H] (sorted rows) = (a [T*k, I] @ W[e] + bias[e]) * gate_scal, weights bf16-layout
    [E, I, H] or MXFP4 blocks [E, H, I/32, 16] with ``scales``."""
    rows, N = c.shape
    K = a.shape[1]
    if rows == 0 or N == 0:
        return
    tiles = max_tiles(routing.num_experts, rows, block_m)
    w, s, *w_strides = _weight_args(w, scales)

    def run(cfg: TileConfig) -> None:
        _gemm2_kernel[(tiles, triton.cdiv(N, cfg.BLOCK_N))](
            a,
            w,
            s,
            bias if bias is not None else c,
            c,
            routing.gate_scal,
            routing.token_offs_raw,
            routing.tile_map(block_m),
            N,
            K,
            a.stride(0),
            a.stride(1),
            *w_strides,
            bias.stride(0) if bias is not None else 0,
            bias.stride(1) if bias is not None else 0,
            c.stride(0),
            MXFP4=scales is not None,
            HAS_BIAS=bias is not None,
            UPCAST=a.dtype == torch.float32 or interpreting(),
            SOFT_BF16=soft_bf16(c.dtype),
            BLOCK_M=block_m,
            BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )

    _launch(("gemm2", scales is not None, block_m, a.dtype, N, K), block_m, a.dtype, run)


def sum_rows(c: torch.Tensor, routing: OgsRouting, out: torch.Tensor) -> None:
    """out [T, H] = for each token, its k rows of c [T*k, H] summed in slot order."""
    T, H = out.shape
    if T == 0 or H == 0:
        return
    block_h = min(triton.next_power_of_2(H), 1024)
    block_t = max(1, 4096 // block_h)
    grid = (triton.cdiv(T, block_t), triton.cdiv(H, block_h))
    _sum_rows_kernel[grid](
        c,
        routing.scatter_indx,
        out,
        T,
        H,
        c.stride(0),
        out.stride(0),
        TOP_K=routing.top_k,
        SOFT_BF16=soft_bf16(out.dtype),
        BLOCK_T=block_t,
        BLOCK_H=block_h,
        num_warps=4,
    )
