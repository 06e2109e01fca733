"""The shapes a config.json implies that more than one part of bcgprof reads: attention heads,
KV heads and head dim. Torch-free: the model stacks and the report readers share this reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bcgprof.errors import ModelConfigError


def config_value(config: dict, *keys: str, default: Any = None) -> Any:
    """The value of the first of ``keys`` that ``config`` holds (not None), else ``default``."""
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return default


@dataclass(frozen=True)
class AttentionShape:
    """The attention of every layer of the unsharded model: ``num_heads`` query heads sharing
    ``num_kv_heads`` KV heads (``num_heads`` a multiple of it), ``head_dim`` wide."""

    num_heads: int
    num_kv_heads: int
    head_dim: int


def attention_shape(config: dict) -> AttentionShape:
    """Heads, KV heads (default: the heads) and head dim (default: hidden / heads) of ``config``;
    one ModelConfigError line when they do not make an attention."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config_value(config, "num_key_value_heads", default=heads))
    head_dim = int(config_value(config, "head_dim", default=hidden // heads))
    if kv_heads < 1 or head_dim < 1:
        raise ModelConfigError(
            f"num_key_value_heads {kv_heads} and head_dim {head_dim} must be positive"
        )
    if heads % kv_heads:
        raise ModelConfigError(
            f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    return AttentionShape(heads, kv_heads, head_dim)
