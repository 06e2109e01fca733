"""Routing for the outer-gather/scatter MoE (``--moe sglang-mxfp4``): from the router's logits to
the expert-sorted layout ``triton_kernels``' ``routing`` hands to ``matmul_ogs``, in its tensors.

``ogs_routing(logits [T, E], k)``: the top k logits of each token, a softmax over those k (gpt-oss's
order, SGLang's ``sm_first=False``), then the T*k (token, slot) rows, numbered ``t*k + s``, sorted
by expert (stable: token order within an expert, no padding). It keeps exactly the routing
tensors of :mod:`~bcgprof.models.kernels.ogs_workspace`, allocated in this order: ``hist``,
``combined_indx`` (the gather indices, sorted position -> row, then the scatter indices, row ->
sorted position), ``gate_scal`` (the weights in sorted order), ``token_offs`` and
``block_pid_map`` (each GEMM tile's expert and block, for every BLOCK_M of ``BLOCK_MS``). Its
temporaries (the top-k values and ids, int64 vectors of T*k and E) are freed before it returns.

Built from ``topk``, a stable ``argsort``, ``searchsorted`` and ``cumsum``: no ``.item()``,
``bincount``, ``nonzero`` or boolean indexing, so it is capturable and deterministic. The top-k
itself is ``torch.topk`` (ties to the lower expert id), as the bf16 router's.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from bcgprof.models.kernels.ogs_workspace import (
    BLOCK_MS,
    INDEX_DTYPE,
    OgsWorkspace,
    max_tiles,
    ogs_workspace_shapes,
)


class OgsRouting(NamedTuple):
    """A routing decision in the expert-sorted layout (views of the workspace's routing tensors)."""

    gate_scal: torch.Tensor  # [T*k] the routing weight of each sorted row, the logits' dtype
    gather_indx: torch.Tensor  # [T*k] int32: sorted position -> row t*k+s
    scatter_indx: torch.Tensor  # [T*k] int32: row t*k+s -> sorted position
    hist: torch.Tensor  # [E] int32: rows per expert
    token_offs_raw: torch.Tensor  # [E+1] int32: rows before each expert
    # [len(BLOCK_MS), E+1] int32: tiles before each expert, per BLOCK_M
    token_offs_pad: torch.Tensor
    block_pid_map: torch.Tensor  # [len(BLOCK_MS), tiles] int32: block << 16 | expert, -1 if none
    top_k: int

    @property
    def num_experts(self) -> int:
        return self.hist.shape[0]

    def tile_map(self, block_m: int) -> torch.Tensor:
        """The block map of tiles of ``block_m`` rows."""
        return self.block_pid_map[BLOCK_MS.index(block_m)]


def ogs_routing(logits: torch.Tensor, k: int, ws: OgsWorkspace | None = None) -> OgsRouting:
    """The top-k routing of ``logits [T, E]`` (any float dtype) in the expert-sorted layout;
    ``ws`` (optional) the workspace shapes of this T, k and E."""
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(
            f"logits must be a floating [T, E] tensor, got {logits.dtype} {tuple(logits.shape)}"
        )
    T, E = logits.shape
    if not 1 <= k <= E:
        raise ValueError(f"top_k must be in 1..{E} (the experts), got {k}")
    ws = ws if ws is not None else ogs_workspace_shapes(T, k, 0, 0, E)
    rows, dev = T * k, logits.device
    top, ids = torch.topk(logits, k, dim=-1)  # [T, k], [T, k] int64
    vals = torch.softmax(top, dim=-1)  # [T, k], the logits' dtype (float32 inside, one rounding)
    del top
    flat = ids.reshape(-1)  # [T*k] expert of row t*k+s
    order = torch.argsort(flat, stable=True)  # [T*k] sorted position -> row
    sorted_e = flat[order]  # [T*k] expert of each sorted position
    del ids, flat
    experts = torch.arange(E, device=dev)
    # [E]
    counts = torch.searchsorted(sorted_e, experts, right=True) - torch.searchsorted(
        sorted_e, experts
    )
    del sorted_e, experts

    hist = torch.zeros(ws.hist, dtype=INDEX_DTYPE, device=dev)
    hist[:E] = counts
    combined = torch.empty(ws.combined_indx, dtype=INDEX_DTYPE, device=dev)
    combined[:rows] = order
    combined[rows:].scatter_(0, order, torch.arange(rows, dtype=INDEX_DTYPE, device=dev))
    gate_scal = vals.reshape(-1)[order]  # [T*k]
    del vals, order
    token_offs = torch.zeros(ws.token_offs, dtype=INDEX_DTYPE, device=dev)
    token_offs[0, 1 : E + 1] = torch.cumsum(counts, 0)
    for i, bm in enumerate(BLOCK_MS, start=1):
        token_offs[i, 1 : E + 1] = torch.cumsum((counts + bm - 1) // bm, 0)
    del counts
    block_pid_map = torch.full(ws.block_pid_map, -1, dtype=INDEX_DTYPE, device=dev)
    n = max_tiles(E, rows)
    tiles = torch.arange(n, dtype=INDEX_DTYPE, device=dev)
    for i in range(len(BLOCK_MS)):
        ends = token_offs[i + 1, 1 : E + 1]  # [E] tiles up to each expert's end
        expert = torch.searchsorted(ends, tiles, right=True, out_int32=True).clamp_(
            max=max(E - 1, 0)
        )
        block = tiles - token_offs[i + 1][expert.long()]
        code = torch.bitwise_or(torch.bitwise_left_shift(block, 16), expert)
        block_pid_map[i, :n] = torch.where(tiles < ends[-1], code, -1)
    return OgsRouting(
        gate_scal,
        combined[:rows],
        combined[rows:],
        hist[:E],
        token_offs[0, : E + 1],
        token_offs[1:, : E + 1],
        block_pid_map[:, :n],
        k,
    )
