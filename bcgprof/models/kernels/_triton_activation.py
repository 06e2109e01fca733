"""Triton kernels of the gated activations (imported only when the Triton path runs).

Each kernel reads a [M, 2I] gate/up tensor (any row stride, unit column stride) and writes
a [M, I] output the caller allocated: nothing else is allocated. The math is float32 with
one rounding, to the output's dtype, at the store.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from bcgprof.models.kernels._backend import interpreting

# elements per program: a memory-bound kernel wants a few thousand
_TILE = 4096


@triton.jit
def bf16_rne(y):
    """float32 -> bfloat16, round to nearest even, with integer ops. Only for Triton's
    interpreter (SOFT_BF16), whose own cast truncates; compiled kernels use ``.to``."""
    bits = y.to(tl.uint32, bitcast=True)
    bits = bits + (((bits >> 16) & 1) + 0x7FFF)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


def soft_bf16(dtype: torch.dtype) -> bool:
    """The SOFT_BF16 flag of the kernels, for results stored as ``dtype``."""
    return dtype == torch.bfloat16 and interpreting()


@triton.jit
def _silu_and_mul_kernel(
    x_ptr,
    out_ptr,
    M,
    I,
    stride_xm,
    stride_om,
    SOFT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < I)[None, :]
    src = x_ptr + rows[:, None] * stride_xm + cols[None, :]
    gate = tl.load(src, mask=mask, other=0.0).to(tl.float32)  # columns [0, I)
    up = tl.load(src + I, mask=mask, other=0.0).to(tl.float32)  # columns [I, 2I)
    y = gate * tl.sigmoid(gate) * up
    if SOFT_BF16:
        y = bf16_rne(y)
    tl.store(
        out_ptr + rows[:, None] * stride_om + cols[None, :],
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _clamped_swiglu_kernel(
    x_ptr,
    out_ptr,
    M,
    I,
    stride_xm,
    stride_om,
    alpha,
    limit,
    SOFT_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < I)[None, :]
    src = x_ptr + rows[:, None] * stride_xm + 2 * cols[None, :]
    gate = tl.load(src, mask=mask, other=0.0).to(tl.float32)  # columns 0::2
    up = tl.load(src + 1, mask=mask, other=0.0).to(tl.float32)  # columns 1::2
    gate = tl.minimum(gate, limit)
    up = tl.minimum(tl.maximum(up, -limit), limit)
    glu = gate * tl.sigmoid(gate * alpha)
    y = (up + 1.0) * glu
    if SOFT_BF16:
        y = bf16_rne(y)
    tl.store(
        out_ptr + rows[:, None] * stride_om + cols[None, :],
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


def _grid_and_blocks(M: int, I: int) -> tuple[tuple[int, int], int, int]:
    block_n = min(triton.next_power_of_2(I), 1024)
    block_m = max(1, _TILE // block_n)
    return (triton.cdiv(M, block_m), triton.cdiv(I, block_n)), block_m, block_n


def silu_and_mul(x: torch.Tensor, out: torch.Tensor) -> None:
    """out [M, I] = silu(x[:, :I]) * x[:, I:]; x [M, 2I]."""
    M, I = out.shape
    if M == 0 or I == 0:
        return
    grid, bm, bn = _grid_and_blocks(M, I)
    _silu_and_mul_kernel[grid](
        x,
        out,
        M,
        I,
        x.stride(0),
        out.stride(0),
        SOFT_BF16=soft_bf16(out.dtype),
        BLOCK_M=bm,
        BLOCK_N=bn,
        num_warps=4,
    )


def clamped_swiglu(x: torch.Tensor, out: torch.Tensor, alpha: float, limit: float) -> None:
    """out [M, I] = gpt-oss's clamped SwiGLU of x [M, 2I] (gate = 0::2, up = 1::2)."""
    M, I = out.shape
    if M == 0 or I == 0:
        return
    grid, bm, bn = _grid_and_blocks(M, I)
    _clamped_swiglu_kernel[grid](
        x,
        out,
        M,
        I,
        x.stride(0),
        out.stride(0),
        float(alpha),
        float(limit),
        SOFT_BF16=soft_bf16(out.dtype),
        BLOCK_M=bm,
        BLOCK_N=bn,
        num_warps=4,
    )
