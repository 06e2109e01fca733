"""Fused gated activations, as the serving engines run them.

Both take the gate/up projection ``x [..., 2I]`` and return a new ``[..., I]`` tensor of
x's dtype. Memory rule: the output is the only allocation (on CUDA, and under the Triton
interpreter); ``x`` is read, never copied (a copy is made only when its last dimension is
not contiguous, which no caller in bcgprof does).

* :func:`silu_and_mul`: gate = the first half of the columns, up = the second half (the
  layout of a merged gate_up projection: Llama, Qwen3, Qwen3-MoE).
  ``out = silu(gate) * up``, i.e. ``gate * sigmoid(gate) * up``.
* :func:`clamped_swiglu`: gpt-oss's layout, gate = columns 0::2, up = 1::2.
  ``g = min(gate, limit)``, ``u = clamp(up, -limit, limit)``,
  ``out = (u + 1) * (g * sigmoid(alpha * g))``.

Math: float32 throughout, one rounding to the output dtype (as SGLang's activation kernels
and vLLM's ``swigluoai_and_mul`` do). The ``*_reference`` functions are the plain PyTorch
form of the same math (same formula, same single rounding; they allocate float32
temporaries) and run wherever the Triton path does not: CPU tensors by default.
"""

from __future__ import annotations

import torch

from bcgprof.models.kernels._backend import META, REFERENCE, choose


def _split_last(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    if x.dim() < 1 or x.shape[-1] % 2:
        raise ValueError(
            f"gated activation needs an even last dimension, got shape {tuple(x.shape)}"
        )
    return x, x.shape[-1] // 2


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """x as a 2-D [M, 2I] tensor with unit column stride (a view whenever possible)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    return x.reshape(-1, x.shape[-1])


def _output(x: torch.Tensor, I: int, out: torch.Tensor | None) -> torch.Tensor:
    shape = (*x.shape[:-1], I)
    if out is None:
        return x.new_empty(shape)
    if (
        tuple(out.shape) != shape
        or out.dtype != x.dtype
        or out.device != x.device
        or not out.is_contiguous()
    ):
        raise ValueError(
            f"out must be a contiguous {x.dtype} tensor of shape {shape} on {x.device}"
        )
    return out


def silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    """PyTorch form of :func:`silu_and_mul`: float32 math, one rounding."""
    x, I = _split_last(x)
    gate, up = x[..., :I].float(), x[..., I:].float()
    return (gate * torch.sigmoid(gate) * up).to(x.dtype)


def clamped_swiglu_reference(x: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    """PyTorch form of :func:`clamped_swiglu`: float32 math, one rounding."""
    x, _ = _split_last(x)
    gate, up = x[..., 0::2].float(), x[..., 1::2].float()
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return ((up + 1) * (gate * torch.sigmoid(gate * alpha))).to(x.dtype)


def silu_and_mul(
    x: torch.Tensor, *, out: torch.Tensor | None = None, backend: str | None = None
) -> torch.Tensor:
    """``silu(x[..., :I]) * x[..., I:]`` for ``x [..., 2I]`` -> ``[..., I]`` (x's dtype).

    ``out`` (optional) is written instead of allocating. ``backend``: see
    :mod:`bcgprof.models.kernels._backend` (None picks Triton on CUDA).
    """
    x, I = _split_last(x)
    mode = choose(x.device, backend)
    if mode == REFERENCE:
        y = silu_and_mul_reference(x)
        return y if out is None else out.copy_(y)
    result = _output(x, I, out)
    if mode != META:
        from bcgprof.models.kernels import _triton_activation

        _triton_activation.silu_and_mul(_as_rows(x), result.view(-1, I))
    return result


def clamped_swiglu(
    x: torch.Tensor,
    alpha: float = 1.702,
    limit: float = 7.0,
    *,
    out: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """gpt-oss's clamped SwiGLU of interleaved ``x [..., 2I]`` (gate 0::2, up 1::2) -> ``[..., I]``.

    ``out`` (optional) is written instead of allocating. ``backend``: see
    :mod:`bcgprof.models.kernels._backend` (None picks Triton on CUDA).
    """
    x, I = _split_last(x)
    mode = choose(x.device, backend)
    if mode == REFERENCE:
        y = clamped_swiglu_reference(x, alpha, limit)
        return y if out is None else out.copy_(y)
    result = _output(x, I, out)
    if mode != META:
        from bcgprof.models.kernels import _triton_activation

        _triton_activation.clamped_swiglu(_as_rows(x), result.view(-1, I), alpha, limit)
    return result
