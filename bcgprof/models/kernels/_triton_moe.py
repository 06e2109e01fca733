"""Triton kernels of the fused MoE (imported only when the Triton path runs): the grouped
GEMM over the routing metadata and the sum over the k slots.

Determinism: every output element is computed by exactly one program, with a K loop in a
fixed order and no atomics, no split-K; so a launch gives the same bits every time, and a
CUDA-graph replay equals an eager run. Launch configurations come from a fixed table
(no autotuning: capture must not benchmark).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from bcgprof.models.kernels._backend import interpreting
from bcgprof.models.kernels._triton_activation import bf16_rne, soft_bf16
from bcgprof.models.kernels.routing import Routing


@triton.jit
def _moe_gemm_kernel(
    a_ptr,
    b_ptr,
    bias_ptr,
    c_ptr,
    weight_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_ptr,
    N,
    K,
    num_rows,
    num_tiles_m,
    stride_am,
    stride_ak,
    stride_be,
    stride_bk,
    stride_bn,
    stride_bias_e,
    stride_bias_n,
    stride_cm,
    stride_cn,
    A_ROW_DIV: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
    EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr,
    SOFT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """C[row] = (A[row // A_ROW_DIV] @ B[expert] + bias[expert]) * weight[row], rounded once.

    Rows come BLOCK_M at a time from sorted_ids; a tile's rows share one expert. A is read
    through the row index (no gathered copy), C written in (token, slot) row order.
    """
    # grouped ordering of (m, n) tiles: GROUP_M m-tiles walk the n-tiles together (L2 reuse)
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(num_tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    if pid_m * BLOCK_M >= tl.load(num_post_ptr):
        return  # a tile past the last expert's rows: the grid is an upper bound

    rows = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = rows < num_rows  # padding rows hold num_rows
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_bn = offs_n % N  # in-bounds loads; the store masks the extra columns
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rows // A_ROW_DIV)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
            b = tl.load(b_ptrs)
        else:
            k_left = K - kk * BLOCK_K
            a = tl.load(a_ptrs, mask=row_ok[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST:  # float32 inputs (exact-ish, no TF32), and the interpreter
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc=acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc=acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if HAS_BIAS:
        bias = tl.load(bias_ptr + expert * stride_bias_e + offs_bn * stride_bias_n).to(tl.float32)
        acc = acc + bias[None, :]
    if MUL_WEIGHT:
        w = tl.load(weight_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        acc = acc * w[:, None]
    if SOFT_BF16:
        acc = bf16_rne(acc)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_n[None, :] < N))


@triton.jit
def mxfp4_to_float(nib, scale):
    """FP4 e2m1 codes (0..15, int32) times E8M0 scales (0..255, int32) -> float32, exactly:
    the float32 bits of the code's value (sign, exponent, one mantissa bit) times 2**(scale - 127)
    built as float32 bits (scale 0 is 2**-127, a subnormal; 255 is inf, as ldexp gives)."""
    e = (nib >> 1) & 3
    m = nib & 1
    mag = tl.where(e > 0, ((e + 126) << 23) | (m << 22), m * (126 << 23))  # 0, 0.5, 1 .. 6
    bits = (mag | ((nib & 8) << 28)).to(tl.uint32)  # the code's top bit is the sign
    value = bits.to(tl.float32, bitcast=True)
    sbits = tl.where(scale == 0, 0x00400000, scale << 23).to(tl.uint32)
    return value * sbits.to(tl.float32, bitcast=True)


@triton.jit
def _moe_gemm_mxfp4_kernel(
    a_ptr,
    b_ptr,
    s_ptr,
    bias_ptr,
    c_ptr,
    weight_ptr,
    sorted_ids_ptr,
    expert_ids_ptr,
    num_post_ptr,
    N,
    K,
    num_rows,
    num_tiles_m,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_se,
    stride_sn,
    stride_sg,
    stride_bias_e,
    stride_bias_n,
    stride_cm,
    stride_cn,
    A_ROW_DIV: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
    EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr,
    SOFT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """:func:`_moe_gemm_kernel` with B given as MXFP4: C[row] = (A[row // A_ROW_DIV] @ W[expert]
    + bias[expert]) * weight[row], W[e][k, n] = fp4(code k of row n of blocks[e]) * 2**(scales[e, n,
    k // 32] - 127).

    blocks [E, N, K/32, 16] uint8 (two codes a byte, the even k in the low nibble; each row's K/2
    bytes contiguous), scales [E, N, K/32] uint8. A BLOCK_K step loads BLOCK_K/2 bytes of each of
    the tile's BLOCK_N rows, decodes the low and the high nibbles into two [BLOCK_K/2, BLOCK_N]
    tiles of A's dtype in registers (exact: two significant bits times a power of two) and
    accumulates the even and the odd columns of A against them: two dots of BLOCK_K/2 per step.
    Nothing is written but C.
    """
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(num_tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    if pid_m * BLOCK_M >= tl.load(num_post_ptr):
        return

    rows = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = rows < num_rows
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_bn = offs_n % N
    # byte within the step; codes 2h (low nibble) and 2h + 1 (high)
    offs_h = tl.arange(0, BLOCK_K // 2)
    # even k
    a_ptrs = a_ptr + (rows // A_ROW_DIV)[:, None] * stride_am + (2 * offs_h)[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_h[:, None] + offs_bn[None, :] * stride_bn
    s_ptrs = (
        s_ptr
        + expert * stride_se
        + (offs_h // 16)[:, None] * stride_sg
        + offs_bn[None, :] * stride_sn
    )

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a_even = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
            a_odd = tl.load(a_ptrs + stride_ak, mask=row_ok[:, None], other=0.0)
            packed = tl.load(b_ptrs).to(tl.int32)
            scale = tl.load(s_ptrs).to(tl.int32)
        else:
            h_left = (K - kk * BLOCK_K) // 2  # K is a multiple of 32: whole bytes, whole groups
            k_ok = offs_h < h_left
            a_even = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            a_odd = tl.load(a_ptrs + stride_ak, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            packed = tl.load(b_ptrs, mask=k_ok[:, None], other=0).to(tl.int32)
            scale = tl.load(s_ptrs, mask=k_ok[:, None], other=0).to(tl.int32)
        w_even = mxfp4_to_float(packed & 0xF, scale)  # [BLOCK_K / 2, BLOCK_N] float32, exact
        w_odd = mxfp4_to_float(packed >> 4, scale)
        if UPCAST:  # float32 inputs (exact-ish, no TF32), and the interpreter
            acc = tl.dot(a_even.to(tl.float32), w_even, acc=acc, input_precision="ieee")
            acc = tl.dot(a_odd.to(tl.float32), w_odd, acc=acc, input_precision="ieee")
        else:
            acc = tl.dot(a_even, w_even.to(a_ptr.dtype.element_ty), acc=acc)
            acc = tl.dot(a_odd, w_odd.to(a_ptr.dtype.element_ty), acc=acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K // 2
        s_ptrs += (BLOCK_K // 32) * stride_sg

    if HAS_BIAS:
        bias = tl.load(bias_ptr + expert * stride_bias_e + offs_bn * stride_bias_n).to(tl.float32)
        acc = acc + bias[None, :]
    if MUL_WEIGHT:
        w = tl.load(weight_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        acc = acc * w[:, None]
    if SOFT_BF16:
        acc = bf16_rne(acc)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_n[None, :] < N))


@triton.jit
def _moe_sum_kernel(
    c_ptr,
    out_ptr,
    T,
    H,
    stride_ct,
    stride_cs,
    stride_ot,
    TOP_K: tl.constexpr,
    SOFT_BF16: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """out[t] = sum over s = 0..k-1, in that order, of c[t, s]; float32, one rounding."""
    t = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = (t < T)[:, None] & (h < H)[None, :]
    src = c_ptr + t[:, None] * stride_ct + h[None, :]
    acc = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
    for s in tl.static_range(TOP_K):
        acc += tl.load(src + s * stride_cs, mask=mask, other=0.0).to(tl.float32)
    if SOFT_BF16:
        acc = bf16_rne(acc)
    tl.store(
        out_ptr + t[:, None] * stride_ot + h[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask
    )


@dataclass(frozen=True)
class GemmConfig:
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    num_warps: int
    num_stages: int


# BLOCK_M -> configuration for 16-bit inputs on Hopper-class GPUs (engine-like defaults:
# bigger tiles for bigger batches; shared memory at most ~128 KiB)
_CONFIGS = {
    16: GemmConfig(16, 64, 128, 1, 4, 4),
    32: GemmConfig(32, 128, 64, 8, 4, 4),
    64: GemmConfig(64, 128, 64, 8, 4, 4),
    128: GemmConfig(128, 128, 64, 8, 8, 4),
}
# used when a configuration does not fit the GPU (OutOfResources at the first launch)
_SMALL = dict(BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
_too_big: set[tuple] = set()


def gemm_config(block_m: int, dtype: torch.dtype) -> GemmConfig:
    """The fixed launch configuration for tiles of ``block_m`` rows of ``dtype``."""
    cfg = _CONFIGS[block_m]
    if dtype == torch.float32:  # no tensor cores: small K steps, two stages
        cfg = replace(cfg, BLOCK_N=min(cfg.BLOCK_N, 64), BLOCK_K=32, num_warps=4, num_stages=2)
    return cfg


def gemm(
    a: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    c: torch.Tensor,
    routing: Routing,
    *,
    a_row_div: int,
    block_m: int,
    weights: torch.Tensor | None = None,
) -> None:
    """c [T*k, N] = per row r of expert e: (a[r // a_row_div] @ w[e] + bias[e]) * weights[r].

    a [*, K] and w [E, K, N] may have any strides; weights (optional) is [T*k] contiguous.
    """
    num_rows, N = c.shape
    K = a.shape[1]
    if num_rows == 0 or N == 0:
        return
    cfg = gemm_config(block_m, a.dtype)
    key = (block_m, a.dtype, N, K)
    if key in _too_big:
        cfg = replace(cfg, **_SMALL)
    num_tiles_m = routing.expert_ids.numel()
    args = (
        a,
        w,
        bias if bias is not None else c,
        c,
        weights if weights is not None else c,
        routing.sorted_ids,
        routing.expert_ids,
        routing.num_tokens_post_padded,
        N,
        K,
        num_rows,
        num_tiles_m,
        a.stride(0),
        a.stride(1),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        bias.stride(0) if bias is not None else 0,
        bias.stride(1) if bias is not None else 0,
        c.stride(0),
        c.stride(1),
    )

    def launch(cfg: GemmConfig) -> None:
        grid = (num_tiles_m * triton.cdiv(N, cfg.BLOCK_N),)
        _moe_gemm_kernel[grid](
            *args,
            A_ROW_DIV=a_row_div,
            HAS_BIAS=bias is not None,
            MUL_WEIGHT=weights is not None,
            EVEN_K=K % cfg.BLOCK_K == 0,
            UPCAST=a.dtype == torch.float32 or interpreting(),
            SOFT_BF16=soft_bf16(c.dtype),
            BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K,
            GROUP_M=cfg.GROUP_M,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )

    try:
        launch(cfg)
    except OutOfResources:  # raised at the first (compiling) launch, before any work
        _too_big.add(key)
        launch(replace(cfg, **_SMALL))


def gemm_mxfp4(
    a: torch.Tensor,
    blocks: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None,
    c: torch.Tensor,
    routing: Routing,
    *,
    a_row_div: int,
    block_m: int,
    weights: torch.Tensor | None = None,
) -> None:
    """:func:`gemm` with the weights as MXFP4: blocks [E, N, K/32, 16] and scales [E, N, K/32]
    (uint8, as a gpt-oss checkpoint stores them; a rank's slice of rows or of groups works), the
    same tile configurations and routing; K = 32 * groups. Each row's bytes must be contiguous
    (``blocks.stride(-1) == 1`` and ``blocks.stride(-2) == 16``)."""
    num_rows, N = c.shape
    K = a.shape[1]
    if blocks.stride(-1) != 1 or blocks.stride(-2) != 16:
        raise ValueError(
            f"MXFP4 blocks must hold each row's bytes contiguously, got strides {blocks.stride()}"
        )
    if num_rows == 0 or N == 0:
        return
    cfg = gemm_config(block_m, a.dtype)
    key = ("mxfp4", block_m, a.dtype, N, K)
    if key in _too_big:
        cfg = replace(cfg, **_SMALL)
    num_tiles_m = routing.expert_ids.numel()
    args = (
        a,
        blocks,
        scales,
        bias if bias is not None else c,
        c,
        weights if weights is not None else c,
        routing.sorted_ids,
        routing.expert_ids,
        routing.num_tokens_post_padded,
        N,
        K,
        num_rows,
        num_tiles_m,
        a.stride(0),
        a.stride(1),
        blocks.stride(0),
        blocks.stride(1),
        scales.stride(0),
        scales.stride(1),
        scales.stride(2),
        bias.stride(0) if bias is not None else 0,
        bias.stride(1) if bias is not None else 0,
        c.stride(0),
        c.stride(1),
    )

    def launch(cfg: GemmConfig) -> None:
        grid = (num_tiles_m * triton.cdiv(N, cfg.BLOCK_N),)
        _moe_gemm_mxfp4_kernel[grid](
            *args,
            A_ROW_DIV=a_row_div,
            HAS_BIAS=bias is not None,
            MUL_WEIGHT=weights is not None,
            EVEN_K=K % cfg.BLOCK_K == 0,
            UPCAST=a.dtype == torch.float32 or interpreting(),
            SOFT_BF16=soft_bf16(c.dtype),
            BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K,
            GROUP_M=cfg.GROUP_M,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )

    try:
        launch(cfg)
    except OutOfResources:
        _too_big.add(key)
        launch(replace(cfg, **_SMALL))


def moe_sum(c: torch.Tensor, out: torch.Tensor) -> None:
    """out [T, H] = c [T, k, H] summed over k in slot order (float32, one rounding)."""
    T, k, H = c.shape
    if T == 0 or H == 0:
        return
    block_h = min(triton.next_power_of_2(H), 1024)
    block_t = max(1, 4096 // block_h)
    grid = (triton.cdiv(T, block_t), triton.cdiv(H, block_h))
    _moe_sum_kernel[grid](
        c,
        out,
        T,
        H,
        c.stride(0),
        c.stride(1),
        out.stride(0),
        TOP_K=k,
        SOFT_BF16=soft_bf16(out.dtype),
        BLOCK_T=block_t,
        BLOCK_H=block_h,
        num_warps=4,
    )
