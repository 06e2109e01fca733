"""The MoE router: a top-k router (:class:`TopKRouter`) and its decision
(:class:`RoutedExperts`). The experts themselves run in
:func:`bcgprof.models.kernels.fused_experts`, the engines' fused MoE."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


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

    def __init__(
        self,
        hidden_size: int,
        num_experts: int,
        top_k: int,
        *,
        bias: bool = False,
        softmax_before_topk: bool = False,
        softmax_dtype: torch.dtype | None = None,
        renormalize: bool = False,
    ):
        super().__init__()
        if not softmax_before_topk and (softmax_dtype is not None or renormalize):
            raise ValueError(
                "softmax_dtype and renormalize apply when softmax_before_topk is set: "
                "a softmax over the k chosen already sums to one"
            )
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

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The router's logits [T, E] alone (for a MoE that routes from them itself)."""
        return F.linear(x, self.weight, self.bias)

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
