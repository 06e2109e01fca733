"""The KV-cache size formula: the one place it is written.

A cache holds one K and one V tensor per layer, ``[seqs, KV heads, context, head dim]``, in
the model's dtype. The capture side sizes the decode cache with it, run.json records the
bytes one token takes, and ``bcgprof explain`` converts costs into tokens of KV cache.
"""

from __future__ import annotations


def kv_cache_bytes(
    num_layers: int,
    kv_heads: int,
    head_dim: int,
    dtype_bytes: int,
    *,
    seqs: int = 1,
    context: int = 1,
) -> int:
    """``layers x 2 (K and V) x seqs x KV heads x context x head dim x dtype bytes``."""
    return num_layers * 2 * seqs * kv_heads * context * head_dim * dtype_bytes


def kv_bytes_per_token(num_layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """``layers x 2 (K and V) x KV heads x head dim x dtype bytes``: one token's cache, every
    layer full."""
    return kv_cache_bytes(num_layers, kv_heads, head_dim, dtype_bytes)


def kv_formula(num_layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> str:
    """:func:`kv_bytes_per_token` written out with its figures, as reports and views show it."""
    return (
        f"{num_layers} layers x 2 x {kv_heads} KV heads x {head_dim} head dim x {dtype_bytes} bytes"
    )
