"""Llama (LlamaForCausalLM), e.g. Llama-3.1-8B: GQA, SwiGLU MLP, llama3 RoPE scaling."""

from __future__ import annotations

from torch import nn

from bcgprof.models.args import ModelArgs
from bcgprof.models.layers.attention import Attention
from bcgprof.models.layers.mlp import DenseMLP
from bcgprof.models.stack import DecoderLayer, DecoderModel


def layer_layout(config: dict, total: int) -> tuple[int | None, list[str]]:
    """No sliding window: every layer attends fully."""
    return None, ["full_attention"] * total


class LlamaModel(DecoderModel):
    family = "llama"

    @classmethod
    def read_args(cls, config: dict, num_layers: int | None = None) -> ModelArgs:
        return ModelArgs.from_config(config, cls.family, num_layers, layer_layout=layer_layout)

    def make_layer(self, layer_idx: int) -> nn.Module:
        a = self.args
        mlp = DenseMLP(
            a.hidden_size,
            a.intermediate_size,
            bias=a.mlp_bias,
            tp_rank=a.tp_rank,
            tp_size=a.tp_size,
        )
        return DecoderLayer(a, layer_idx, Attention(a, layer_idx), mlp, self.norm_fp32_weight)
