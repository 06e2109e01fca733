"""The model spec, without torch: presets and config.json files, the family registry and
the family a config is, the shapes it implies and the KV-cache formula.

Both halves of bcgprof build on it: the model stacks in :mod:`bcgprof.models` (which import
torch) read their configs through it, and the read side (estimate, explain, predict, the
CLI's argument checks) uses it without importing torch or the model code.

    >>> from bcgprof.spec import resolve_model
    >>> spec = resolve_model("gpt-oss-20b")
    >>> spec.family, spec.hidden_size, spec.attention.num_kv_heads
    ('gpt_oss', 2880, 8)
"""

from __future__ import annotations

from bcgprof.spec.config import (
    ModelSpec,
    check_capturable,
    config_hash,
    detect_family,
    resolve_model,
)
from bcgprof.spec.kv import kv_bytes_per_token, kv_cache_bytes, kv_formula
from bcgprof.spec.presets import list_presets, presets_dir, read_config
from bcgprof.spec.registry import Family, families, family_names, get_family
from bcgprof.spec.shapes import AttentionShape, attention_shape, config_value

__all__ = [
    "AttentionShape",
    "Family",
    "ModelSpec",
    "attention_shape",
    "check_capturable",
    "config_hash",
    "config_value",
    "detect_family",
    "families",
    "family_names",
    "get_family",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "kv_formula",
    "list_presets",
    "presets_dir",
    "read_config",
    "resolve_model",
]
