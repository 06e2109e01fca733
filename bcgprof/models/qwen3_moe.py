"""Qwen3-MoE (Qwen3MoeForCausalLM), e.g. Qwen3-30B-A3B: Qwen3's attention (per-head
Q/K RMSNorm) with a sparse MoE block: a bias-free router, softmax over all E experts in
float32, top-k (8 of 128), renormalised over the k when ``norm_topk_prob``; SwiGLU
experts. Layers in ``mlp_only_layers`` (or off the ``decoder_sparse_step``) are dense."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from bcgprof.models.args import ModelArgs
from bcgprof.models.checkpoint import CheckpointTarget
from bcgprof.models.kernels import fused_experts
from bcgprof.models.layers.attention import Attention
from bcgprof.models.layers.mlp import DenseMLP
from bcgprof.models.layers.moe import RoutedExperts, TopKRouter
from bcgprof.models.stack import DecoderLayer, DecoderModel
from bcgprof.models.tp import shard_range, shard_size, tp_all_reduce
from bcgprof.spec.shapes import config_value

# --------------------------------------------------------------------------- config.json


def layer_layout(config: dict, total: int) -> tuple[int | None, list[str]]:
    """The window only when ``use_sliding_window``; transformers then applies it to every layer."""
    sliding = config.get("sliding_window")
    if not config.get("use_sliding_window", False):
        sliding = None
    return sliding, ["sliding_attention" if sliding is not None else "full_attention"] * total


def read_moe(args: ModelArgs, config: dict) -> None:
    """The MoE fields; layers in ``mlp_only_layers`` or off the ``decoder_sparse_step`` are
    dense."""
    # published configs say num_experts; transformers 5 writes num_local_experts
    args.num_experts = int(config_value(config, "num_experts", "num_local_experts"))
    args.top_k = int(config["num_experts_per_tok"])
    args.moe_intermediate_size = int(config["moe_intermediate_size"])
    args.norm_topk_prob = bool(config.get("norm_topk_prob", False))
    step = int(config.get("decoder_sparse_step", 1) or 1)
    dense = set(config.get("mlp_only_layers") or [])
    args.moe_layers = [
        i not in dense and args.num_experts > 0 and (i + 1) % step == 0
        for i in range(args.num_layers)
    ]


# --------------------------------------------------------------------- modules and checkpoint names


def make_router(args: ModelArgs) -> TopKRouter:
    """Bias-free; softmax over all E experts in float32, top-k, renormalised over the k
    when ``norm_topk_prob``."""
    return TopKRouter(
        args.hidden_size,
        args.num_experts,
        args.top_k,
        softmax_before_topk=True,
        softmax_dtype=torch.float32,
        renormalize=args.norm_topk_prob,
    )


class Qwen3MoeExperts(nn.Module):
    """E SwiGLU experts stacked as transformers 5 fuses them: gate_up_proj [E, 2I, H]
    (gate rows first), down_proj [E, H, I]. Published checkpoints name them one by one
    (``experts.{e}.gate_proj.weight`` ...); the loader stacks them.

    Under tensor parallelism every rank holds every expert with I / tp of the
    intermediate (gate and up rows, down columns); the block all-reduces the output."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        E, H = args.num_experts, args.hidden_size
        I = shard_size(args.moe_intermediate_size, args.tp_size)
        self.num_experts, self.hidden_size, self.intermediate_size = E, H, I
        self.total_intermediate_size = args.moe_intermediate_size
        self.tp_rank, self.tp_size = args.tp_rank, args.tp_size
        self.gate_up_proj = nn.Parameter(torch.zeros(E, 2 * I, H))
        self.down_proj = nn.Parameter(torch.zeros(E, H, I))

    def forward(self, x: torch.Tensor, route: RoutedExperts) -> torch.Tensor:
        w1 = self.gate_up_proj.transpose(1, 2)  # [E, H, 2I] view
        w2 = self.down_proj.transpose(1, 2)  # [E, I, H] view
        # the fused MoE, its output written over x (SGLang's in-place default)
        return fused_experts(x, route.ids, route.weights, w1, w2, "silu", out=x)  # [T, H]


class Qwen3MoeSparseBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.tp_size = args.tp_size
        self.gate = make_router(args)  # replicated on every rank
        self.experts = Qwen3MoeExperts(args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return tp_all_reduce(self.experts(x, self.gate(x)), self.tp_size)  # [T, H]

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator[CheckpointTarget]:
        ex = self.experts
        E, H, I, full = (
            ex.num_experts,
            ex.hidden_size,
            ex.intermediate_size,
            ex.total_intermediate_size,
        )
        rows = shard_range(full, ex.tp_rank, ex.tp_size)
        src, cols = ((rows,), (slice(None), rows)) if ex.tp_size > 1 else ((), ())
        yield CheckpointTarget(f"{ckpt}.gate.weight", f"{param}.gate.weight", (), (E, H))
        for e in range(E):
            pre = f"{ckpt}.experts.{e}"
            yield CheckpointTarget(
                f"{pre}.gate_proj.weight",
                f"{param}.experts.gate_up_proj",
                (e, slice(0, I)),
                (full, H),
                src,
            )
            yield CheckpointTarget(
                f"{pre}.up_proj.weight",
                f"{param}.experts.gate_up_proj",
                (e, slice(I, 2 * I)),
                (full, H),
                src,
            )
            yield CheckpointTarget(
                f"{pre}.down_proj.weight", f"{param}.experts.down_proj", (e,), (H, full), cols
            )


class Qwen3MoeModel(DecoderModel):
    family = "qwen3_moe"

    @classmethod
    def read_args(cls, config: dict, num_layers: int | None = None) -> ModelArgs:
        return ModelArgs.from_config(
            config,
            cls.family,
            num_layers,
            layer_layout=layer_layout,
            qk_norm=True,
            read_family=read_moe,
        )

    def make_layer(self, layer_idx: int) -> nn.Module:
        a = self.args
        if a.moe_layers[layer_idx]:
            mlp: nn.Module = Qwen3MoeSparseBlock(a)
        else:
            mlp = DenseMLP(a.hidden_size, a.intermediate_size, tp_rank=a.tp_rank, tp_size=a.tp_size)
        return DecoderLayer(a, layer_idx, Attention(a, layer_idx), mlp, self.norm_fp32_weight)
