"""gpt-oss (GptOssForCausalLM): openai/gpt-oss-20b and gpt-oss-120b.

Published details, each implemented here and tested against transformers:
attention sinks (a learned per-head logit in the softmax denominator); sliding-window
(``sliding_window``, 128) and full attention alternating by ``layer_types`` (sliding on
even layers when the config omits it); YaRN RoPE; biases on the Q/K/V and output
projections; a router with bias whose top-k logits go through a softmax over the k
selected; experts with the clamped SwiGLU ``(clamp(up, ±limit) + 1) * g * sigmoid(alpha g)``,
``g = clamp(gate, max=limit)``, gate and up interleaved in the columns of ``gate_up_proj``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from bcgprof.errors import ModelConfigError
from bcgprof.models import mxfp4
from bcgprof.models.args import ModelArgs
from bcgprof.models.checkpoint import CheckpointTarget
from bcgprof.models.kernels import (
    OgsRouting,
    experts_ogs,
    experts_ogs_mxfp4,
    fused_experts,
    fused_experts_mxfp4,
    ogs_routing,
)
from bcgprof.models.layers.attention import Attention
from bcgprof.models.layers.moe import RoutedExperts, TopKRouter
from bcgprof.models.stack import DecoderLayer, DecoderModel
from bcgprof.models.tp import shard_range, shard_size, tp_all_reduce
from bcgprof.spec.shapes import config_value
from bcgprof.vocab import Moe

# --------------------------------------------------------------------------- config.json


def layer_layout(config: dict, total: int) -> tuple[int | None, list[str]]:
    """The window in force, and sliding attention on even layers when the config lists no
    layer_types."""
    sliding = config.get("sliding_window")
    return sliding, ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(total)]


def read_moe(args: ModelArgs, config: dict) -> None:
    """Every layer is MoE; the experts' intermediate is the config's intermediate_size."""
    args.num_experts = int(config_value(config, "num_local_experts", "num_experts"))
    args.top_k = int(config_value(config, "num_experts_per_tok", "experts_per_token"))
    args.moe_intermediate_size = args.intermediate_size
    args.moe_intermediate_key = "intermediate_size"
    args.moe_layers = [True] * args.num_layers
    args.swiglu_alpha = float(config_value(config, "swiglu_alpha", default=1.702))
    args.swiglu_limit = float(config_value(config, "swiglu_limit", default=7.0))
    args.rope_theta_default = 150000.0


# --------------------------------------------------------------------- modules and checkpoint names


def make_router(args: ModelArgs) -> TopKRouter:
    """Linear with bias over the E experts; softmax over the top-k logits."""
    return TopKRouter(args.hidden_size, args.num_experts, args.top_k, bias=True)


class GptOssExperts(nn.Module):
    """E experts stored as transformers' bf16 layout: gate_up_proj [E, H, 2I] (gate/up
    interleaved), down_proj [E, I, H], with biases.

    Under tensor parallelism every rank holds every expert with I / tp of the
    intermediate: columns [2 r I/tp, 2 (r+1) I/tp) of gate_up_proj (whole gate/up pairs,
    as the columns interleave) and the matching rows of down_proj. The down bias is
    added by rank 0 only; the block all-reduces the output.

    With ``moe="sglang-mxfp4"`` the experts run as SGLang's MXFP4 MoE allocates
    (:func:`~bcgprof.models.kernels.experts_ogs`, from an expert-sorted routing) instead of
    the fused MoE."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        E, H = args.num_experts, args.hidden_size
        I = shard_size(args.moe_intermediate_size, args.tp_size)
        self.num_experts, self.hidden_size, self.intermediate_size = E, H, I
        self.total_intermediate_size = args.moe_intermediate_size
        self.tp_rank, self.tp_size = args.tp_rank, args.tp_size
        self.alpha, self.limit = args.swiglu_alpha, args.swiglu_limit
        self.moe = args.moe
        self.gate_up_proj = nn.Parameter(torch.zeros(E, H, 2 * I))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(E, 2 * I))
        self.down_proj = nn.Parameter(torch.zeros(E, I, H))
        self.down_proj_bias = nn.Parameter(torch.zeros(E, H))

    def forward(self, x: torch.Tensor, route: RoutedExperts | OgsRouting) -> torch.Tensor:
        """The fused MoE with the clamped SwiGLU, its output written over ``x`` (SGLang's
        in-place default), or with ``moe="sglang-mxfp4"`` (an :class:`OgsRouting`) a new
        tensor: [T, H], this rank's partial sum under tensor parallelism."""
        b2 = self.down_proj_bias if self.tp_rank == 0 else None  # once over the ranks
        if isinstance(route, OgsRouting):
            return experts_ogs(
                x,
                route,
                self.gate_up_proj,
                self.down_proj,
                self.gate_up_proj_bias,
                b2,
                alpha=self.alpha,
                limit=self.limit,
            )
        return fused_experts(
            x,
            route.ids,
            route.weights,
            self.gate_up_proj,
            self.down_proj,
            "clamped_swiglu",
            self.gate_up_proj_bias,
            b2,
            alpha=self.alpha,
            limit=self.limit,
            out=x,
        )


class GptOssPackedExperts(nn.Module):
    """The experts kept as the checkpoint stores them (``experts="packed"``): MXFP4 blocks and
    scales, uint8, with the bf16 biases.

    * ``gate_up_proj_blocks`` [E, 2I, H/32, 16], ``gate_up_proj_scales`` [E, 2I, H/32]: row n is
      column n of the bf16 ``gate_up_proj`` [E, H, 2I] (gate and up interleaved the same way);
    * ``down_proj_blocks`` [E, H, I/32, 16], ``down_proj_scales`` [E, H, I/32]: row h is column h
      of ``down_proj`` [E, I, H].

    :func:`~bcgprof.models.kernels.moe.fused_experts_mxfp4` decodes them inside its GEMMs: no
    bf16 copy of an expert weight exists at any time, and the capture's intermediates are those
    of the bf16 experts. Parameter bytes: ``E * 3 * I * H * 17/32`` plus the biases, against
    ``E * 3 * I * H * 2`` (bf16).

    Under tensor parallelism a rank keeps rows [2 r I/tp, 2 (r+1) I/tp) of gate_up's blocks and
    scales (whole gate/up pairs) and groups [r I/(32 tp), (r+1) I/(32 tp)) of down's: the same
    slices as the bf16 layout, so I/tp must be a multiple of the 32-value group."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        E, H = args.num_experts, args.hidden_size
        I = shard_size(args.moe_intermediate_size, args.tp_size)
        if H % mxfp4.GROUP or I % mxfp4.GROUP:
            raise ModelConfigError(
                f"packed MXFP4 experts need the hidden size ({H}) and each rank's expert "
                "intermediate size "
                f"({I}"
                f"{f' = {args.moe_intermediate_size} / {args.tp_size}' if args.tp_size > 1 else ''}"
                ") to be "
                f"multiples of {mxfp4.GROUP}; use bf16 experts or another --tp"
            )
        self.num_experts, self.hidden_size, self.intermediate_size = E, H, I
        self.total_intermediate_size = args.moe_intermediate_size
        self.tp_rank, self.tp_size = args.tp_rank, args.tp_size
        self.alpha, self.limit = args.swiglu_alpha, args.swiglu_limit
        # the kernels' choice (tests force "triton" under the interpreter)
        self.backend: str | None = None
        self.moe = args.moe
        G = mxfp4.GROUP

        def packed(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.zeros(*shape, dtype=torch.uint8), requires_grad=False)

        self.gate_up_proj_blocks = packed(E, 2 * I, H // G, G // 2)
        self.gate_up_proj_scales = packed(E, 2 * I, H // G)
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(E, 2 * I))
        self.down_proj_blocks = packed(E, H, I // G, G // 2)
        self.down_proj_scales = packed(E, H, I // G)
        self.down_proj_bias = nn.Parameter(torch.zeros(E, H))

    def forward(self, x: torch.Tensor, route: RoutedExperts | OgsRouting) -> torch.Tensor:
        """As :meth:`GptOssExperts.forward`, through the MXFP4 kernels."""
        b2 = self.down_proj_bias if self.tp_rank == 0 else None
        if isinstance(route, OgsRouting):
            return experts_ogs_mxfp4(
                x,
                route,
                self.gate_up_proj_blocks,
                self.gate_up_proj_scales,
                self.down_proj_blocks,
                self.down_proj_scales,
                self.gate_up_proj_bias,
                b2,
                alpha=self.alpha,
                limit=self.limit,
                backend=self.backend,
            )
        return fused_experts_mxfp4(
            x,
            route.ids,
            route.weights,
            self.gate_up_proj_blocks,
            self.gate_up_proj_scales,
            self.down_proj_blocks,
            self.down_proj_scales,
            "clamped_swiglu",
            self.gate_up_proj_bias,
            b2,
            alpha=self.alpha,
            limit=self.limit,
            out=x,
            backend=self.backend,
        )


class GptOssMLP(nn.Module):
    """The MoE block: router, then experts, then the all-reduce over the ranks.

    ``moe="sglang-mxfp4"`` routes as SGLang's ``GptOssSparseMoeBlock.forward_normal`` with its
    MXFP4 MoE on Hopper: the router's logits stay alive until the block returns, and the routing
    is ``triton_kernels``' expert-sorted layout (:func:`~bcgprof.models.kernels.ogs_routing`)."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.tp_size = args.tp_size
        self.top_k = args.top_k
        self.moe = args.moe
        self.router = make_router(args)  # replicated on every rank
        self.experts = (
            GptOssPackedExperts(args) if args.experts == "packed" else GptOssExperts(args)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.moe == Moe.SGLANG_MXFP4:
            logits = self.router.logits(x)  # [T, E]
            routing = ogs_routing(logits, self.top_k)
            return tp_all_reduce(self.experts(x, routing), self.tp_size)  # [T, H], a new tensor
        return tp_all_reduce(self.experts(x, self.router(x)), self.tp_size)  # [T, H]

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator[CheckpointTarget]:
        ex = self.experts
        E, H, I = ex.num_experts, ex.hidden_size, ex.total_intermediate_size
        sharded = ex.tp_size > 1
        rows = shard_range(I, ex.tp_rank, ex.tp_size)  # this rank's intermediate
        pairs = slice(2 * rows.start, 2 * rows.stop)  # its interleaved gate/up columns
        all_ = slice(None)
        entries = {
            "router.weight": ((E, H), ()),
            "router.bias": ((E,), ()),
            "experts.gate_up_proj_bias": ((E, 2 * I), (all_, pairs)),
            "experts.down_proj_bias": ((E, H), ()),
        }
        if isinstance(ex, GptOssPackedExperts):  # as published: gate_up's rows, down's groups
            G = mxfp4.GROUP
            groups = slice(rows.start // G, rows.stop // G)
            entries.update(
                {
                    "experts.gate_up_proj_blocks": ((E, 2 * I, H // G, G // 2), (all_, pairs)),
                    "experts.gate_up_proj_scales": ((E, 2 * I, H // G), (all_, pairs)),
                    "experts.down_proj_blocks": ((E, H, I // G, G // 2), (all_, all_, groups)),
                    "experts.down_proj_scales": ((E, H, I // G), (all_, all_, groups)),
                }
            )
        else:
            entries.update(
                {
                    "experts.gate_up_proj": ((E, H, 2 * I), (all_, all_, pairs)),
                    "experts.down_proj": ((E, I, H), (all_, rows)),
                }
            )
        for name, (shape, source) in entries.items():
            yield CheckpointTarget(
                f"{ckpt}.{name}", f"{param}.{name}", (), shape, source if sharded else ()
            )


class GptOssModel(DecoderModel):
    family = "gpt_oss"
    norm_fp32_weight = True  # gpt-oss scales in float32, then casts
    packed_experts = True  # experts="packed": GptOssPackedExperts
    sglang_mxfp4_moe = True  # moe="sglang-mxfp4": SGLang's MXFP4 MoE (experts_ogs)

    @classmethod
    def read_args(cls, config: dict, num_layers: int | None = None) -> ModelArgs:
        # any hidden_act (the experts' activation is gpt-oss's own), attention biases by default
        return ModelArgs.from_config(
            config,
            cls.family,
            num_layers,
            layer_layout=layer_layout,
            silu_only=False,
            attention_bias=True,
            read_family=read_moe,
        )

    def make_layer(self, layer_idx: int) -> nn.Module:
        a = self.args
        attn = Attention(a, layer_idx, sinks=True)
        return DecoderLayer(a, layer_idx, attn, GptOssMLP(a), self.norm_fp32_weight)
