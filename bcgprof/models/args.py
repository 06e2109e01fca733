"""ModelArgs: what a layer stack needs from config.json, with the reading every family shares.

The family-independent part lives here (sizes, heads, head_dim, eps, layer types and
their validation, the MoE range check); each family module supplies what only it knows
(which layers slide, which activations it accepts, its MoE and RoPE fields) through
the hooks of :meth:`ModelArgs.from_config`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bcgprof.errors import ModelConfigError
from bcgprof.spec.shapes import attention_shape, config_value

# (config, num_hidden_layers) -> (the sliding window in force or None, default layer types)
LayerLayout = Callable[[dict, int], tuple[Any, list[str]]]


@dataclass
class ModelArgs:
    """Everything a layer stack needs from config.json, read in one place.

    Head counts and intermediate sizes live here (and are copied onto the modules as
    attributes) so that a later tensor-parallel split divides them in one spot.
    """

    family: str
    hidden_size: int
    num_layers: int  # layers actually built (num_hidden_layers, or the truncation)
    total_layers: int  # num_hidden_layers of the config
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    max_position_embeddings: int
    layer_types: list[str]  # "full_attention" | "sliding_attention", one per built layer
    sliding_window: int | None
    attention_bias: bool = False
    mlp_bias: bool = False
    intermediate_size: int = 0  # dense MLP
    qk_norm: bool = False
    # MoE
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate_size: int = 0
    # the config field it is read from (for messages)
    moe_intermediate_key: str = "moe_intermediate_size"
    norm_topk_prob: bool = False
    moe_layers: list[bool] = field(default_factory=list)  # per built layer: MoE (True) or dense
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    rope_theta_default: float = 10000.0
    # expert weights: "bf16" (the activations' dtype) or "packed" (MXFP4 as the checkpoint stores
    # them)
    experts: str = "bf16"
    # the MoE's workspace: "fused-bf16" or "sglang-mxfp4" (bcgprof.vocab.Moe)
    moe: str = "fused-bf16"
    # tensor parallelism: this rank's index and the number of ranks (1 = unsharded)
    tp_rank: int = 0
    tp_size: int = 1

    def window(self, layer_idx: int) -> int | None:
        """The sliding window of a layer, or None for full causal attention."""
        if self.layer_types[layer_idx] == "sliding_attention" and self.sliding_window:
            return int(self.sliding_window)
        return None

    @classmethod
    def from_config(
        cls,
        config: dict,
        family: str,
        num_layers: int | None = None,
        *,
        layer_layout: LayerLayout,
        silu_only: bool = True,
        attention_bias: bool = False,
        qk_norm: bool = False,
        read_family: Callable[[ModelArgs, dict], None] | None = None,
    ) -> ModelArgs:
        """The shared reading of ``config``, with the family's part plugged in.

        ``layer_layout(config, total)`` gives the sliding window in force and the layer
        types to use when the config lists none; ``silu_only``: reject any other
        ``hidden_act``; ``attention_bias``: the default when the config omits it;
        ``qk_norm``: per-head Q/K RMSNorm; ``read_family(args, config)`` fills the
        family's own fields (MoE, activation, RoPE default) before the final checks.
        """
        total = int(config["num_hidden_layers"])
        if num_layers is None:
            num_layers = total
        if not isinstance(num_layers, int) or not 1 <= num_layers <= total:
            raise ModelConfigError(
                f"num_layers must be between 1 and {total} (the model's num_hidden_layers), got "
                f"{num_layers}"
            )
        hidden = int(config["hidden_size"])
        shape = attention_shape(config)
        act = config.get("hidden_act", "silu")
        if silu_only and act not in ("silu", "swish"):
            raise ModelConfigError(
                f"hidden_act {act!r} is not supported for {family}; bcgprof implements silu"
            )

        sliding, default_types = layer_layout(config, total)
        layer_types = config.get("layer_types") or default_types
        if len(layer_types) < total:
            raise ModelConfigError(
                f"layer_types lists {len(layer_types)} layers, num_hidden_layers is {total}"
            )
        for t in layer_types:
            if t not in ("full_attention", "sliding_attention"):
                raise ModelConfigError(
                    f"layer type {t!r} is not supported (full_attention, sliding_attention)"
                )

        args = cls(
            family=family,
            hidden_size=hidden,
            num_layers=num_layers,
            total_layers=total,
            num_heads=shape.num_heads,
            num_kv_heads=shape.num_kv_heads,
            head_dim=shape.head_dim,
            vocab_size=int(config["vocab_size"]),
            rms_norm_eps=float(config_value(config, "rms_norm_eps", default=1e-6)),
            max_position_embeddings=int(
                config_value(config, "max_position_embeddings", default=4096)
            ),
            layer_types=list(layer_types[:num_layers]),
            sliding_window=int(sliding) if sliding else None,
            attention_bias=bool(config.get("attention_bias", attention_bias)),
            mlp_bias=bool(config.get("mlp_bias", False)),
            intermediate_size=int(config_value(config, "intermediate_size", default=0)),
            qk_norm=qk_norm,
        )
        if read_family is not None:
            read_family(args, config)
        if args.num_experts and not 1 <= args.top_k <= args.num_experts:
            raise ModelConfigError(
                f"num_experts_per_tok {args.top_k} must be in 1..{args.num_experts}"
            )
        return args
