"""Qwen3-MoE (Qwen3MoeForCausalLM), e.g. Qwen3-30B-A3B: Qwen3's attention (per-head
Q/K RMSNorm) with a sparse MoE block: a bias-free router, softmax over all E experts in
float32, top-k (8 of 128), renormalised over the k when ``norm_topk_prob``; SwiGLU
experts. Layers in ``mlp_only_layers`` (or off the ``decoder_sparse_step``) are dense."""

from __future__ import annotations

from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from bcgprof.models.common import (
    Attention,
    CheckpointTarget,
    DecoderLayer,
    DecoderModel,
    DenseMLP,
    ModelArgs,
    RoutedExperts,
    fused_moe,
    shard_range,
    tp_all_reduce,
)


class Qwen3MoeRouter(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.top_k = args.top_k
        self.norm_topk_prob = args.norm_topk_prob
        self.weight = nn.Parameter(torch.zeros(args.num_experts, args.hidden_size))  # [E, H]

    def forward(self, x: torch.Tensor) -> RoutedExperts:
        logits = F.linear(x, self.weight)  # [T, E]
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        top, ids = torch.topk(probs, self.top_k, dim=-1)  # [T, k]
        if self.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)
        return RoutedExperts(ids, top.to(logits.dtype))


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)  # [M, I] each
    return F.silu(gate) * up


class Qwen3MoeExperts(nn.Module):
    """E SwiGLU experts stacked as transformers 5 fuses them: gate_up_proj [E, 2I, H]
    (gate rows first), down_proj [E, H, I]. Published checkpoints name them one by one
    (``experts.{e}.gate_proj.weight`` ...); the loader stacks them.

    Under tensor parallelism every rank holds every expert with I / tp of the
    intermediate (gate and up rows, down columns); the block all-reduces the output."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        E, H = args.num_experts, args.hidden_size
        I = args.moe_intermediate_size // args.tp_size  # this rank's share
        self.num_experts, self.hidden_size, self.intermediate_size = E, H, I
        self.total_intermediate_size = args.moe_intermediate_size
        self.tp_rank, self.tp_size = args.tp_rank, args.tp_size
        self.gate_up_proj = nn.Parameter(torch.zeros(E, 2 * I, H))
        self.down_proj = nn.Parameter(torch.zeros(E, H, I))

    def forward(self, x: torch.Tensor, route: RoutedExperts) -> torch.Tensor:
        w1 = self.gate_up_proj.transpose(1, 2)  # [E, H, 2I] view
        w2 = self.down_proj.transpose(1, 2)  # [E, I, H] view
        return fused_moe(x, route, w1, w2, swiglu)  # [T, H]


class Qwen3MoeSparseBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.tp_size = args.tp_size
        self.gate = Qwen3MoeRouter(args)  # replicated on every rank
        self.experts = Qwen3MoeExperts(args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tp_all_reduce(self.experts(x, self.gate(x)), self.tp_size)  # [T, H]

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator[CheckpointTarget]:
        ex = self.experts
        E, H, I, full = ex.num_experts, ex.hidden_size, ex.intermediate_size, ex.total_intermediate_size
        rows = shard_range(full, ex.tp_rank, ex.tp_size)
        src, cols = ((rows,), (slice(None), rows)) if ex.tp_size > 1 else ((), ())
        yield CheckpointTarget(f"{ckpt}.gate.weight", f"{param}.gate.weight", (), (E, H))
        for e in range(E):
            pre = f"{ckpt}.experts.{e}"
            yield CheckpointTarget(f"{pre}.gate_proj.weight", f"{param}.experts.gate_up_proj", (e, slice(0, I)),
                                   (full, H), src)
            yield CheckpointTarget(f"{pre}.up_proj.weight", f"{param}.experts.gate_up_proj", (e, slice(I, 2 * I)),
                                   (full, H), src)
            yield CheckpointTarget(f"{pre}.down_proj.weight", f"{param}.experts.down_proj", (e,), (H, full), cols)


class Qwen3MoeModel(DecoderModel):
    family = "qwen3_moe"

    def make_layer(self, layer_idx: int) -> nn.Module:
        a = self.args
        if a.moe_layers[layer_idx]:
            mlp: nn.Module = Qwen3MoeSparseBlock(a)
        else:
            mlp = DenseMLP(a.hidden_size, a.intermediate_size, tp_rank=a.tp_rank, tp_size=a.tp_size)
        return DecoderLayer(a, layer_idx, Attention(a, layer_idx), mlp, self.norm_fp32_weight)
