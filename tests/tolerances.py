"""Tolerances for comparing two floating-point computations of the same value, derived from the
dtype and the size of the computation instead of picked on one machine.

The bound (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1 and §4.2):
with unit roundoff ``u = eps / 2`` (``eps = torch.finfo(dtype).eps``, the spacing of the
numbers just above 1.0), a sum of ``n`` terms added in *any* order (left to right, blocked,
pairwise, split over threads or SIMD lanes: every way of repeatedly adding two of them),
and a dot product of length ``n``, computed in floating point satisfy

    |computed - exact| <= gamma(n) * sum(|terms|),   gamma(n) = n*u / (1 - n*u).

Two correct implementations that round in a different order (another kernel, another batch
size, another thread count) are each within that of the exact value, so they differ by at
most ``2 * gamma(n) * sum(|terms|)``, about ``n * eps`` relative to the magnitude of the terms.
A chain of ``depth`` such sums (the layers of a model) adds the errors to first order, and
``gamma(j) + gamma(k) <= gamma(j + k)``, so the chain is bounded by ``2 * gamma(depth * n)``.

What it assumes: each stage is well conditioned, i.e. its output has the magnitude of its
terms (no catastrophic cancellation), so errors are not amplified from stage to stage. The
normalisations of a transformer (RMSNorm before each block, softmax weights summing to one)
keep that roughly true; tests/models/test_tolerances.py checks it against float64 for every family.

Elementwise functions count their roundings (``ACTIVATION_TERMS``; an exp is worth a few ulps,
``TRANSCENDENTAL_ULPS``). A 16-bit path that accumulates in float32 and rounds to bf16 or
fp16 only between steps is bounded by ``close(bf16, reduction=<its 16-bit roundings>)`` plus
the float32 bound of its sums: bf16 keeps 8 significant bits (eps 2^-7, each rounding within
2^-8 relative), FP4 E2M1 keeps 2 (eps 2^-1, ``FP4_E2M1_EPS``).
"""

from __future__ import annotations

import math
from typing import TypedDict

import torch

from bcgprof.models.args import ModelArgs

# FP4 E2M1 (MXFP4's elements) has one mantissa bit: the values next to 1.0 are 1.0 and 1.5.
FP4_E2M1_EPS = 2.0**-1

# Rounded operations an exp or sigmoid is worth: SLEEF's u10 functions (PyTorch's vectorised CPU
# paths) are within 1 ulp, NumPy's SIMD float32 exp documents at most 2.52 ulp (Triton's
# interpreter).
TRANSCENDENTAL_ULPS = 4

# Rounded operations of a SwiGLU (gpt-oss's clamped one the longest): the clamps, the product with
# alpha, the exp, the sigmoid's add and division, the products and the add of one to up.
ACTIVATION_TERMS = 8 + TRANSCENDENTAL_ULPS


class Tolerance(TypedDict):
    """The keyword arguments of ``torch.testing.assert_close`` (and ``torch.allclose``)."""

    rtol: float
    atol: float


def eps(dtype: torch.dtype) -> float:
    """The spacing of ``dtype``'s numbers just above 1.0 (twice its unit roundoff)."""
    if dtype == getattr(torch, "float4_e2m1fn_x2", None):
        return FP4_E2M1_EPS
    return float(torch.finfo(dtype).eps)


def close(dtype: torch.dtype, *, reduction: int, depth: int = 1, scale: float = 1.0) -> Tolerance:
    """``rtol`` and ``atol`` for ``torch.testing.assert_close`` of two computations in ``dtype``.

    ``reduction``: terms rounded along one stage (the length of its sum or dot product, plus its
    other roundings); ``depth``: stages chained one after another; ``scale``: the magnitude of
    the terms, ``sum(|terms|)`` where it is known, else the largest magnitude of the values
    compared. Returns ``rtol = 2 * gamma(reduction * depth)`` and ``atol = rtol * scale``.
    Raises ValueError where ``reduction * depth * u >= 1/2``, where no such bound exists.
    """
    if reduction < 1 or depth < 1 or scale < 0:
        raise ValueError(
            f"reduction {reduction} and depth {depth} must be >= 1, scale {scale} >= 0"
        )
    n_u = reduction * depth * eps(dtype) / 2
    if n_u >= 0.5:
        raise ValueError(
            f"{reduction * depth} rounded terms in {dtype}: no useful bound (n*u = {n_u:.2f})"
        )
    bound = 2 * n_u / (1 - n_u)
    return Tolerance(rtol=bound, atol=bound * scale)


def attention_terms(*, head_dim: int, keys: int, logit: float) -> int:
    """Rounded terms of softmax attention of one query over ``keys`` keys, relative to the
    largest magnitude of the values (the output is their convex combination), ``logit`` the
    largest ``scale * sum(|q_i * k_i|)`` of a score. exp turns an absolute error of its argument
    into the same relative error, so the score's ``head_dim`` terms and the subtraction of the
    running maximum count ``logit`` times, and twice, since every probability is in both the
    numerator and the denominator; the denominator and the weighted sum add ``keys`` terms each."""
    magnitude = max(1, math.ceil(logit))
    return 2 * ((head_dim + 2) * magnitude + TRANSCENDENTAL_ULPS) + 2 * keys + 2


def largest_logit(q: torch.Tensor, k: torch.Tensor, scale: float) -> float:
    """``scale * sum(|q_i * k_i|)`` over every pair of a query row and a key row (the last dim is
    head_dim; pairs across heads and sequences included, which only makes it larger)."""
    d = q.shape[-1]
    return scale * float(
        (q.abs().reshape(-1, d).double() @ k.abs().reshape(-1, d).double().T).max()
    )


def attention_close(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    keys: int,
    sinks: torch.Tensor | None = None,
    depth: int = 1,
) -> Tolerance:
    """``close`` for two float32 softmax attentions of ``q`` over ``keys`` of ``k`` and ``v``
    (``sinks``: one more logit per head in the denominator), ``depth`` of them chained."""
    logit = largest_logit(q, k, scale)
    if sinks is not None:
        logit, keys = max(logit, sinks.abs().max().item()), keys + 1
    terms = attention_terms(head_dim=q.shape[-1], keys=keys, logit=logit)
    return close(torch.float32, reduction=terms, depth=depth, scale=v.abs().max().item())


def mlp_terms(*, hidden: int, intermediate: int, experts: int = 1) -> int:
    """Rounded terms along a (routed) MLP: the up projection and its bias (hidden + 1), the
    activation, the down projection and its bias (intermediate + 1), and the routing weight's
    product and the sum over a token's ``experts``."""
    return hidden + 1 + ACTIVATION_TERMS + intermediate + 1 + 1 + experts


def layer_terms(args: ModelArgs, *, keys: int) -> int:
    """Rounded terms along one decoder layer of a built model (its ``model.args``), ``keys`` the
    most keys a query attends to: the two RMSNorms (hidden each), the Q/K/V projection (hidden),
    the Q/K norms (head_dim), the scores (head_dim), the softmax's denominator and the weighted
    sum of values (keys each) and its exp, the output projection (heads * head_dim), RoPE and the
    residual adds (a few), the router (hidden), and the MLP (``mlp_terms``)."""
    hidden, head_dim = args.hidden_size, args.head_dim
    attention = (
        3 * hidden + 2 * head_dim + 2 * keys + TRANSCENDENTAL_ULPS + args.num_heads * head_dim + 6
    )
    mlp = mlp_terms(
        hidden=hidden,
        intermediate=max(args.intermediate_size, args.moe_intermediate_size),
        experts=max(args.top_k, 1),
    )
    return attention + hidden + mlp


def model_close(
    args: ModelArgs, *, keys: int, scale: float, dtype: torch.dtype = torch.float32
) -> Tolerance:
    """``close`` for the hidden states of a forward through a built model (``model.args``):
    ``layer_terms`` per layer, ``args.num_layers`` layers plus one stage for the embedding and
    the final norm; ``scale`` the largest magnitude of the hidden states compared."""
    return close(
        dtype, reduction=layer_terms(args, keys=keys), depth=args.num_layers + 1, scale=scale
    )
