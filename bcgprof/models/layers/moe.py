"""The MoE dispatch: a top-k router (:class:`TopKRouter`), its decision
(:class:`RoutedExperts`), the grouped GEMM (:func:`grouped_mm`) and the token-choice
expert computation with a fused-MoE memory profile (:func:`fused_moe`)."""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


def grouped_mm_supported(x: torch.Tensor) -> bool:
    """Whether :func:`grouped_mm` takes ``torch._grouped_mm`` for ``x`` (capturable) or the
    eager loop. Tests patch this name on this module to force the fallback."""
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
    if grouped_mm_supported(x):
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


class TopKRouter(nn.Module):
    """Token-choice router: a linear map to E expert logits (``bias`` optional), then k
    experts per token and their weights. The two orders the families publish:

    * ``softmax_before_topk=False`` (gpt-oss): top-k over the logits, then a softmax over
      the k chosen; the weights come out in the logits' dtype.
    * ``softmax_before_topk=True`` (Qwen3-MoE): a softmax over all E experts in
      ``softmax_dtype`` (float32 for Qwen3-MoE), top-k of the probabilities, optionally
      renormalised to sum to one over the k (``renormalize``, the config's
      ``norm_topk_prob``), then cast to the logits' dtype.

    Each order runs exactly the ops (and holds exactly the temporaries) of the family's
    reference router. Replicated on every tensor-parallel rank.
    """

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, *, bias: bool = False,
                 softmax_before_topk: bool = False, softmax_dtype: torch.dtype | None = None,
                 renormalize: bool = False):
        super().__init__()
        if not softmax_before_topk and (softmax_dtype is not None or renormalize):
            raise ValueError("softmax_dtype and renormalize apply when softmax_before_topk is set: "
                             "a softmax over the k chosen already sums to one")
        self.num_experts = num_experts
        self.top_k = top_k
        self.softmax_before_topk = softmax_before_topk
        self.softmax_dtype = softmax_dtype
        self.renormalize = renormalize
        self.weight = nn.Parameter(torch.zeros(num_experts, hidden_size))  # [E, H]
        if bias:
            self.bias = nn.Parameter(torch.zeros(num_experts))  # [E]
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> RoutedExperts:
        # One method per order, each with the locals of the family's own router: a frame
        # releases its tensors in the order its variables first appear in the code, so a
        # single body holding both orders would free them in a different order.
        if self.softmax_before_topk:
            return self.softmax_then_topk(x)
        return self.topk_then_softmax(x)

    def topk_then_softmax(self, x: torch.Tensor) -> RoutedExperts:
        logits = F.linear(x, self.weight, self.bias)  # [T, E]
        top, ids = torch.topk(logits, self.top_k, dim=-1)  # [T, k]
        return RoutedExperts(ids, torch.softmax(top, dim=-1))

    def softmax_then_topk(self, x: torch.Tensor) -> RoutedExperts:
        logits = F.linear(x, self.weight, self.bias)  # [T, E]
        probs = torch.softmax(logits, dim=-1, dtype=self.softmax_dtype)  # [T, E]
        top, ids = torch.topk(probs, self.top_k, dim=-1)  # [T, k]
        if self.renormalize:
            top = top / top.sum(dim=-1, keepdim=True)
        return RoutedExperts(ids, top.to(logits.dtype))


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
