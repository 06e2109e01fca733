"""The decode KV cache: allocated once, before any capture, outside the graph pool.

One K and one V tensor per layer, ``[seqs, Hkv, context, D]`` (this rank's KV heads), in
the model's dtype. Sequence ``b`` of a decode batch lives in row ``b``. Attaching the cache
to a stack (:func:`attach`) switches every attention layer to its decode path: it writes
the new token's K and V into the cache and attends over the cached tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from bcgprof.models.layers.attention import Attention
from bcgprof.spec.kv import kv_bytes_per_token, kv_cache_bytes

# kv_bytes_per_token is the spec's formula, named here too for the capture side's importers
__all__ = ["KVCache", "allocate", "attach", "cache_bytes", "kv_bytes_per_token"]


def _attention_layers(model: nn.Module) -> list[Attention]:
    return [cast(Attention, layer.self_attn) for layer in cast(nn.ModuleList, model.layers)]


def cache_bytes(model: nn.Module, seqs: int, context: int) -> int:
    """Bytes :func:`allocate` would take for ``model`` (meta or materialised) and this shape."""
    width = next(model.parameters()).element_size()
    return sum(
        kv_cache_bytes(1, a.num_kv_heads, a.head_dim, width, seqs=seqs, context=context)
        for a in _attention_layers(model)
    )


@dataclass
class KVCache:
    k: list[torch.Tensor]  # per layer [seqs, Hkv, context, D]
    v: list[torch.Tensor]
    seqs: int
    context: int

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)


def allocate(
    model: nn.Module,
    seqs: int,
    context: int,
    device: torch.device,
    generator: torch.Generator | None = None,
) -> KVCache:
    """Allocate (and fill with seeded values, like past tokens' keys and values) the cache for
    ``model``."""
    dtype = next(model.parameters()).dtype
    k: list[torch.Tensor] = []
    v: list[torch.Tensor] = []
    for a in _attention_layers(model):
        shape = (seqs, a.num_kv_heads, context, a.head_dim)
        for store in (k, v):
            t = torch.empty(shape, dtype=dtype, device=device)
            t.normal_(0.0, 1.0, generator=generator)
            store.append(t)
    return KVCache(k, v, seqs, context)


def attach(model: nn.Module, cache: KVCache | None) -> None:
    """Give every attention layer its slice of ``cache`` (None: back to prefill without a cache)."""
    for i, a in enumerate(_attention_layers(model)):
        a.kv_cache = None if cache is None else (cache.k[i], cache.v[i])
