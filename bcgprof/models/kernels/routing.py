"""Routing metadata for the fused MoE GEMMs, built on the device without a host sync.

The layout is the engines' ``moe_align_block_size``: the T*k (token, slot) rows, numbered
``t*k + s``, grouped by expert in row order, each expert's group padded with the value
T*k (a row that does not exist) up to a multiple of BM; one expert id per BM-row tile; the
number of rows in use. A GEMM launch covers every tile that could exist (a static grid)
and tiles past ``num_tokens_post_padded`` return at once.

Built from a stable argsort and ``searchsorted`` (no ``.item()``, ``bincount``,
``nonzero`` or boolean indexing, no Python branch on values), so it is capturable and
deterministic: equal inputs give equal metadata, and ``scatter_`` writes each slot once.
Its temporaries (a few int64 vectors of T*k) are freed before the caller allocates the
GEMM caches.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from bcgprof.models.kernels.workspace import METADATA_DTYPE, MoEWorkspace


class Routing(NamedTuple):
    sorted_ids: torch.Tensor  # [T*k + E*(BM-1)] int32: row t*k+s, or T*k for padding
    expert_ids: torch.Tensor  # [cdiv(len(sorted_ids), BM)] int32: each tile's expert
    num_tokens_post_padded: torch.Tensor  # [1] int32


def align_routing(topk_ids: torch.Tensor, ws: MoEWorkspace) -> Routing:
    """Metadata for ``topk_ids [T, k]`` (int, values in [0, E)) in ``ws``'s shapes."""
    rows, E, bm = ws.rows, ws.num_experts, ws.block_m
    dev = topk_ids.device
    flat = topk_ids.reshape(-1).long()  # [T*k]
    order = torch.argsort(flat, stable=True)  # [T*k] sorted position -> row
    sorted_e = flat[order]  # [T*k] expert of each sorted position
    experts = torch.arange(E, device=dev)
    starts = torch.searchsorted(sorted_e, experts)  # [E] first sorted position of each expert
    counts = torch.searchsorted(sorted_e, experts, right=True) - starts  # [E]
    padded_ends = torch.cumsum((counts + bm - 1) // bm * bm, 0)  # [E]
    padded_starts = padded_ends - (counts + bm - 1) // bm * bm  # [E]
    # a row's slot: its expert's padded start plus its rank within the expert
    slot = padded_starts[sorted_e] + torch.arange(rows, device=dev) - starts[sorted_e]  # [T*k]
    sorted_ids = torch.full(ws.sorted_ids, rows, dtype=METADATA_DTYPE, device=dev)
    sorted_ids.scatter_(0, slot, order.to(METADATA_DTYPE))
    tile_starts = torch.arange(ws.expert_ids[0], device=dev) * bm
    # tiles past the last expert's end are never read; clamp keeps their id in range
    expert_ids = torch.searchsorted(padded_ends, tile_starts, right=True, out_int32=True).clamp_(
        max=max(E - 1, 0)
    )
    num_post = padded_ends[-1:].to(METADATA_DTYPE)
    return Routing(sorted_ids, expert_ids, num_post)
