"""Qwen3 (Qwen3ForCausalLM), e.g. Qwen3-8B: Llama's stack plus a per-head RMSNorm on Q
and K (before RoPE). Sliding window only where ``use_sliding_window`` is set (layers >=
``max_window_layers``, as transformers has it); the published models attend fully."""

from __future__ import annotations

from torch import nn

from bcgprof.models.common import Attention, DecoderLayer, DecoderModel, DenseMLP


class Qwen3Model(DecoderModel):
    family = "qwen3"

    def make_layer(self, layer_idx: int) -> nn.Module:
        a = self.args
        mlp = DenseMLP(a.hidden_size, a.intermediate_size, tp_rank=a.tp_rank, tp_size=a.tp_size)
        return DecoderLayer(a, layer_idx, Attention(a, layer_idx), mlp, self.norm_fp32_weight)
