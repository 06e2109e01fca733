"""Llama (LlamaForCausalLM), e.g. Llama-3.1-8B: GQA, SwiGLU MLP, llama3 RoPE scaling."""

from __future__ import annotations

from torch import nn

from bcgprof.models.common import Attention, DecoderLayer, DecoderModel, DenseMLP


class LlamaModel(DecoderModel):
    family = "llama"

    def make_layer(self, layer_idx: int) -> nn.Module:
        a = self.args
        mlp = DenseMLP(a.hidden_size, a.intermediate_size, bias=a.mlp_bias, tp_rank=a.tp_rank, tp_size=a.tp_size)
        return DecoderLayer(a, layer_idx, Attention(a, layer_idx), mlp, self.norm_fp32_weight)
