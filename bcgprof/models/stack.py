"""The decoder stack every family builds: :class:`DecoderModel` (embedding, layers, final
norm, rotary tables, and the checkpoint API the loaders use) and :class:`DecoderLayer`
(the pre-norm residual block)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Protocol, cast

import torch
from torch import nn

from bcgprof.errors import ModelConfigError
from bcgprof.models.args import ModelArgs
from bcgprof.models.checkpoint import CheckpointTarget
from bcgprof.models.layers.attention import Attention
from bcgprof.models.layers.norm import RMSNorm
from bcgprof.models.layers.rope import RotaryEmbedding, rope_parameters
from bcgprof.models.tp import shard
from bcgprof.vocab import Moe, words

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


class CheckpointSource(Protocol):
    """A module that says where its parameters come from in a published checkpoint (each MLP)."""

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator[CheckpointTarget]: ...


class DecoderModel(nn.Module):
    """A decoder-only layer stack: embedding, layers, final norm. No LM head.

    ``forward(input_ids [T], positions [T]) -> [T, hidden]`` (final-norm hidden states).
    Subclasses (one per family) set ``family``, implement ``read_args`` (the family's
    reading of config.json) and ``make_layer``.

    The checkpoint API used by the loaders in :mod:`bcgprof.models.weights`:
    ``checkpoint_shapes``, ``ignores_checkpoint_name``, ``load_checkpoint_tensor``.
    """

    family: str = ""
    norm_fp32_weight: bool = False
    # whether make_layer can keep MXFP4 experts packed (experts="packed")
    packed_experts: bool = False
    sglang_mxfp4_moe: bool = False  # whether make_layer builds SGLang's MXFP4 MoE (sglang-mxfp4)

    def __init__(
        self,
        config: dict,
        num_layers: int | None = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        experts: str = "bf16",
        moe: str = Moe.FUSED_BF16,
    ):
        super().__init__()
        self.config = config
        if experts not in ("bf16", "packed"):
            raise ModelConfigError(f"experts must be 'bf16' or 'packed', got {experts!r}")
        if experts == "packed" and not self.packed_experts:
            raise ModelConfigError(
                f"{self.family} has no MXFP4 experts to keep packed; use experts='bf16'"
            )
        if moe not in words(Moe):
            choices = ", ".join(map(repr, words(Moe)))
            raise ModelConfigError(f"moe must be one of {choices}, got {moe!r}")
        if moe == Moe.SGLANG_MXFP4 and not self.sglang_mxfp4_moe:
            raise ModelConfigError(
                f"{self.family} has no SGLang MXFP4 MoE to build; use moe='fused-bf16'"
            )
        self.args = shard(self.read_args(config, num_layers), tp_rank, tp_size)
        self.args.experts = experts
        self.args.moe = str(moe)
        self.tp_rank, self.tp_size = self.args.tp_rank, self.args.tp_size
        a = self.args
        self.num_layers = a.num_layers
        self.hidden_size = a.hidden_size
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList([self.make_layer(i) for i in range(a.num_layers)])
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps, self.norm_fp32_weight)
        # one rotary table per distinct RoPE description (usually one for all layers)
        specs: dict[str, dict] = {}
        self._rope_of_layer: list[str] = []
        for lt in a.layer_types:
            p = rope_parameters(config, lt, a.rope_theta_default)
            key = next((k for k, v in specs.items() if v == p), None)
            if key is None:
                key = f"r{len(specs)}"
                specs[key] = p
            self._rope_of_layer.append(key)
        self.rotary = nn.ModuleDict(
            {k: RotaryEmbedding(p, a.head_dim, a.max_position_embeddings) for k, p in specs.items()}
        )
        self._ckpt: dict[str, CheckpointTarget] | None = None

    @classmethod
    def read_args(cls, config: dict, num_layers: int | None = None) -> ModelArgs:
        """The family's :class:`ModelArgs` from ``config`` (unsharded), keeping ``num_layers``
        layers."""
        raise NotImplementedError

    def make_layer(self, layer_idx: int) -> nn.Module:
        raise NotImplementedError

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)  # [T, H] (the embedding is replicated on every rank)
        tables = {
            k: rope(positions) for k, rope in self.rotary.items()
        }  # each ([T, D/2], [T, D/2])
        # decode (a KV cache attached): token t is sequence t's next token, at positions[t]
        decode = cast(DecoderLayer, self.layers[0]).self_attn.kv_cache is not None
        # the running sum of the residual stream, as the engines carry it
        residual: torch.Tensor | None = None
        for layer, key in zip(self.layers, self._rope_of_layer, strict=True):
            cos, sin = tables[key]
            x, residual = layer(x, residual, cos, sin, positions if decode else None)
        assert residual is not None  # a stack has at least one layer
        x, _ = add_rmsnorm_(x, residual, self.norm)
        return x  # [T, H]

    def reset_buffers(self) -> None:
        """Recompute derived buffers (RoPE); safe after any move, cast or weight init."""
        for rope in self.rotary.values():
            cast(RotaryEmbedding, rope).reset_buffers()

    # -- checkpoint API -----------------------------------------------------------

    def checkpoint_targets(self) -> dict[str, CheckpointTarget]:
        if self._ckpt is None:
            targets = [
                CheckpointTarget(
                    "model.embed_tokens.weight",
                    "embed_tokens.weight",
                    (),
                    (self.args.vocab_size, self.hidden_size),
                ),
                CheckpointTarget("model.norm.weight", "norm.weight", (), (self.hidden_size,)),
            ]
            for i, layer in enumerate(self.layers):
                targets.extend(
                    cast(DecoderLayer, layer).checkpoint_entries(f"model.layers.{i}", f"layers.{i}")
                )
            self._ckpt = {t.name: t for t in targets}
        return self._ckpt

    def checkpoint_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor this stack needs from a published checkpoint of its family, with
        its shape in the dequantised layout (gpt-oss experts as transformers' bf16
        ``gate_up_proj`` [E, H, 2I] etc.; with packed experts, the ``*_blocks`` and ``*_scales``
        as published). Layers >= num_layers and the LM head excluded."""
        return {name: tuple(t.shape) for name, t in self.checkpoint_targets().items()}

    def ignores_checkpoint_name(self, name: str) -> bool:
        """True for checkpoint tensors deliberately not loaded: the LM head, layers past
        the truncation, rotary inv_freq buffers some exports carry."""
        if name.startswith("lm_head.") or name.endswith("rotary_emb.inv_freq"):
            return True
        m = _LAYER.match(name)
        return m is not None and int(m.group(1)) >= self.num_layers

    def load_checkpoint_tensor(self, name: str, tensor: torch.Tensor) -> None:
        """Copy one checkpoint tensor into its place (a slice of a fused parameter where
        the stack fuses), converting dtype and device."""
        target = self.checkpoint_targets().get(name)
        if target is None:
            raise ModelConfigError(f"unexpected checkpoint tensor {name} for a {self.family} stack")
        if tuple(tensor.shape) != tuple(target.shape):
            raise ModelConfigError(
                f"checkpoint tensor {name} has shape {tuple(tensor.shape)}, expected "
                f"{tuple(target.shape)}"
            )
        param = self.get_parameter(target.param)
        with torch.no_grad():
            param[target.index].copy_(tensor[target.source] if target.source else tensor)

    def checkpoint_tensor(self, name: str) -> torch.Tensor:
        """The published tensor ``name`` read back from this (unsharded) stack: the
        inverse of :meth:`load_checkpoint_tensor` (tests write checkpoints with it)."""
        if self.tp_size != 1:
            raise ModelConfigError(
                "checkpoint_tensor reads whole published tensors: only from an unsharded stack"
            )
        target = self.checkpoint_targets()[name]
        return self.get_parameter(target.param)[target.index].detach().reshape(target.shape)


def add_rmsnorm_(
    x: torch.Tensor, residual: torch.Tensor, norm: nn.Module
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual += x; x = norm(residual)``, both in place: the two buffers SGLang's fused
    add-RMSNorm keeps (the norm's own temporaries are freed before it returns)."""
    residual.add_(x)
    x.copy_(norm(residual))
    return x, residual


class DecoderLayer(nn.Module):
    """Pre-norm residual block, carried as SGLang carries it: the block's output ``x`` and the
    running ``residual``, each one [T, H] buffer.

    ``forward(x, residual) -> (x, residual)``: the first layer starts the residual from its
    input and normalises into a new buffer; later layers add and normalise in place. The
    attention writes a new buffer, which is then added and normalised in place and handed
    to the MLP; a MoE writes its output over it, a dense MLP returns a new one. While a
    layer runs, its caller still holds the layer's input: three [T, H] buffers are alive
    at the MLP's peak, as in the engine.
    """

    def __init__(
        self,
        args: ModelArgs,
        layer_idx: int,
        attn: Attention,
        mlp: nn.Module,
        norm_fp32_weight: bool,
    ):
        super().__init__()
        self.layer_idx = layer_idx
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps, norm_fp32_weight)
        self.self_attn = attn
        self.post_attention_layernorm = RMSNorm(
            args.hidden_size, args.rms_norm_eps, norm_fp32_weight
        )
        self.mlp = mlp

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual, x = x, self.input_layernorm(x)  # [T, H] each
        else:
            x, residual = add_rmsnorm_(x, residual, self.input_layernorm)
        # [T, H], a new buffer; with positions, decode over the attached KV cache
        x = (
            self.self_attn(x, cos, sin)
            if positions is None
            else self.self_attn(x, cos, sin, positions)
        )
        x, residual = add_rmsnorm_(x, residual, self.post_attention_layernorm)
        return self.mlp(x), residual  # [T, H]

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator[CheckpointTarget]:
        H = self.input_layernorm.weight.shape[0]
        for name in ("input_layernorm", "post_attention_layernorm"):
            yield CheckpointTarget(f"{ckpt}.{name}.weight", f"{param}.{name}.weight", (), (H,))
        yield from self.self_attn.checkpoint_entries(f"{ckpt}.self_attn", f"{param}.self_attn")
        yield from cast(CheckpointSource, self.mlp).checkpoint_entries(
            f"{ckpt}.mlp", f"{param}.mlp"
        )
