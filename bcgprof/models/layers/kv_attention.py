"""Decode attention: one new token per sequence, attending over that sequence's cached tokens.

The cache is padded, one row of ``context`` slots per sequence (sequence ``b`` of a batch
lives in row ``b``), head-major so each sequence's keys of one head are contiguous:
K and V ``[seqs, Hkv, context, D]`` per layer. A token at position ``p`` is written to
slot ``p`` of its row and sees slots ``0..p`` (``p - window + 1 .. p`` in a sliding-window
layer): the lengths live in a tensor, never in a Python integer, so the same code runs
eagerly behind the graph break (``--graph breakable``) and inside a full CUDA graph
(``--graph full``), with static shapes either way.

The core walks the context in blocks with an online softmax (float32 accumulators), so
its working memory is ``[B, Hq, block]`` floats whatever the context length, and it is
deterministic: no atomics, the same reduction order every run.
"""

from __future__ import annotations

import torch

from bcgprof.bcg.breaks import graph_break

DECODE_BLOCK = 1024  # context slots per block of the online softmax


def write_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
) -> None:
    """Store each sequence's new key and value: ``cache[b, :, positions[b]] = k[b]``.

    k_cache, v_cache [S, Hkv, C, D]; k, v [B, Hkv, D] (B <= S); positions [B].
    """
    rows = torch.arange(k.shape[0], device=k.device)  # [B]
    k_cache[rows, :, positions] = k
    v_cache[rows, :, positions] = v


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    positions: torch.Tensor,
    *,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of each sequence's new token over its cache, through the graph-break point.

    q [B, Hq, D]; k_cache, v_cache [S, Hkv, C, D] (rows 0..B-1 used); positions [B].
    Returns [B, Hq, D], allocated before the break.
    """
    out = torch.empty_like(q)  # [B, Hq, D]
    graph_break(
        decode_attention_core,
        q,
        k_cache,
        v_cache,
        positions,
        out,
        scale=scale,
        window=window,
        sinks=sinks,
    )
    return out


def decode_attention_core(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    positions: torch.Tensor,
    out: torch.Tensor,
    *,
    scale: float,
    window: int | None,
    sinks: torch.Tensor | None,
    block: int = DECODE_BLOCK,
) -> None:
    """Blocked online-softmax attention over the cache; writes ``out``. Capturable: static
    shapes, no sync."""
    B, Hq, D = q.shape
    Hkv, C = k_cache.shape[1], k_cache.shape[2]
    G = Hq // Hkv
    k_rows, v_rows = k_cache[:B], v_cache[:B]  # [B, Hkv, C, D]
    qg = q.view(B, Hkv, G, D)  # query head h = kv * G + g reads KV head kv
    pos = positions.view(B, 1, 1, 1)
    neg_inf = float("-inf")
    m = torch.full((B, Hkv, G, 1), neg_inf, dtype=torch.float32, device=q.device)
    l = torch.zeros((B, Hkv, G, 1), dtype=torch.float32, device=q.device)
    acc = torch.zeros((B, Hkv, G, D), dtype=torch.float32, device=q.device)
    for start in range(0, C, block):
        stop = min(start + block, C)
        # [B, Hkv, G, blk]
        s = torch.matmul(qg, k_rows[:, :, start:stop].transpose(-1, -2)).float().mul_(scale)
        slots = torch.arange(start, stop, device=q.device).view(1, 1, 1, -1)
        blocked = slots > pos
        if window is not None:
            blocked = blocked | (slots <= pos - window)
        s.masked_fill_(blocked, neg_inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == neg_inf, 0.0)  # a block with nothing visible yet
        p = s.sub_(m_safe).exp_()
        corr = torch.exp(m - m_safe)
        l = l * corr + p.sum(dim=-1, keepdim=True)
        # P in the cache's dtype for the second product, as flash kernels do: no float copy of V
        acc = acc * corr + torch.matmul(p.to(v_rows.dtype), v_rows[:, :, start:stop]).float()
        m = m_new
    if sinks is not None:  # each head's sink logit joins the softmax denominator
        l = l + torch.exp(sinks.to(torch.float32).view(1, Hkv, G, 1) - m)
    out.copy_((acc / l).view(B, Hq, D))


def reference_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    positions: torch.Tensor,
    *,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain float32 softmax over each sequence's visible slots, one sequence at a time (tests
    only)."""
    B, Hq, D = q.shape
    Hkv = k_cache.shape[1]
    G = Hq // Hkv
    out = torch.empty(B, Hq, D, dtype=torch.float32)
    for b in range(B):
        p = int(positions[b])
        lo = 0 if window is None else max(0, p - window + 1)
        k = k_cache[b, :, lo : p + 1].float().repeat_interleave(G, dim=0)  # [Hq, n, D]
        v = v_cache[b, :, lo : p + 1].float().repeat_interleave(G, dim=0)
        s = torch.einsum("hd,hnd->hn", q[b].float(), k) * scale  # [Hq, n]
        if sinks is not None:
            s = torch.cat([s, sinks.float().view(Hq, 1)], dim=-1)
        w = torch.softmax(s, dim=-1)[:, : k.shape[1]]
        out[b] = torch.einsum("hn,hnd->hd", w, v)
    return out.to(q.dtype)
