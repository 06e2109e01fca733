"""Qwen3 (Qwen3ForCausalLM), e.g. Qwen3-8B: Llama's stack plus a per-head RMSNorm on Q
and K (before RoPE). Sliding window only where ``use_sliding_window`` is set (layers >=
``max_window_layers``, as transformers has it); the published models attend fully."""

from __future__ import annotations

from torch import nn

from bcgprof.models.args import ModelArgs
from bcgprof.models.layers.attention import Attention
from bcgprof.models.layers.mlp import DenseMLP
from bcgprof.models.stack import DecoderLayer, DecoderModel


def layer_layout(config: dict, total: int) -> tuple[int | None, list[str]]:
    """The window only when ``use_sliding_window``; then it applies from ``max_window_layers``
    on."""
    sliding = config.get("sliding_window")
    if not config.get("use_sliding_window", False):
        sliding = None
    mwl = int(config.get("max_window_layers", total))
    return sliding, [
        "sliding_attention" if sliding is not None and i >= mwl else "full_attention"
        for i in range(total)
    ]


class Qwen3Model(DecoderModel):
    family = "qwen3"

    @classmethod
    def read_args(cls, config: dict, num_layers: int | None = None) -> ModelArgs:
        return ModelArgs.from_config(
            config, cls.family, num_layers, layer_layout=layer_layout, qk_norm=True
        )

    def make_layer(self, layer_idx: int) -> nn.Module:
        a = self.args
        mlp = DenseMLP(a.hidden_size, a.intermediate_size, tp_rank=a.tp_rank, tp_size=a.tp_size)
        return DecoderLayer(a, layer_idx, Attention(a, layer_idx), mlp, self.norm_fp32_weight)
