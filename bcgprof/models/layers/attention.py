"""Attention: the graph-break point (:func:`attention`), the kernels the breakable graph
runs eagerly behind it (:func:`attention_core` and the paths it picks: flash / SDPA on
CUDA, a chunked online softmax everywhere else), a T x T reference for tests, and the
:class:`Attention` module (fused QKV, optional Q/K norm, RoPE, sinks, output projection).

Shapes: q ``[T, Hq, D]``, k and v ``[T, Hkv, D]`` (Hq a multiple of Hkv).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from bcgprof.bcg.breaks import graph_break
from bcgprof.models.args import ModelArgs
from bcgprof.models.checkpoint import CheckpointTarget
from bcgprof.models.layers.kv_attention import decode_attention, write_kv
from bcgprof.models.layers.norm import RMSNorm
from bcgprof.models.layers.rope import apply_rotary
from bcgprof.models.tp import row_parallel_linear, split_heads

# Query rows per block and the budget of one float32 score tile of the chunked path.
# Tests lower these to exercise block boundaries on tiny models.
ATTN_BLOCK_Q = 512
ATTN_TILE_ELEMS = 1 << 24  # 16M float32 = 64 MiB per [heads, block_q, block_k] tile


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of T tokens over themselves, through the graph-break point.

    q [T, Hq, D], k and v [T, Hkv, D] (Hq a multiple of Hkv; query head h reads KV head
    h // (Hq // Hkv)). ``window``: attend only to the last ``window`` keys (i - window < j
    <= i). ``sinks`` [Hq]: a learned logit per head added to the softmax denominator
    (gpt-oss). Returns [T, Hq, D].

    The output is allocated here, before the break, so nothing the break creates has
    to outlive it; the core writes into it and returns None.
    """
    out = torch.empty_like(q)  # [T, Hq, D]
    graph_break(
        attention_core,
        q,
        k,
        v,
        out,
        scale=scale,
        window=window,
        sinks=sinks,
        block_q=ATTN_BLOCK_Q,
        tile_elems=ATTN_TILE_ELEMS,
    )
    return out


def attention_core(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    scale: float,
    window: int | None,
    sinks: torch.Tensor | None,
    block_q: int = ATTN_BLOCK_Q,
    tile_elems: int = ATTN_TILE_ELEMS,
) -> None:
    """The op a breakable graph runs eagerly: reads q, k, v (and sinks), writes ``out``.

    Uses nothing but its arguments. On CUDA, full causal attention goes to a flash /
    memory-efficient SDPA kernel, with sinks applied from the flash kernel's log-sum-exp
    where it has one (bf16/fp16); sliding windows, and every CPU case, go to the chunked
    online-softmax path, whose memory is bounded independently of T.
    """
    if q.is_cuda and window is None:
        if sinks is None:
            sdpa_causal(q, k, v, out, scale=scale)
            return
        if flash_lse_supported(q):
            sdpa_causal_sinks(q, k, v, out, scale=scale, sinks=sinks)
            return
    chunked_attention(
        q,
        k,
        v,
        out,
        scale=scale,
        window=window,
        sinks=sinks,
        block_q=block_q,
        tile_elems=tile_elems,
    )


def _expand_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """[T, H, D] -> [1, Hq, T, D] each, KV heads repeated to the query heads."""
    group = q.shape[1] // k.shape[1]
    qh = q.transpose(0, 1).unsqueeze(0)  # [1, Hq, T, D]
    kh = k.transpose(0, 1).repeat_interleave(group, dim=0).unsqueeze(0)  # [1, Hq, T, D]
    vh = v.transpose(0, 1).repeat_interleave(group, dim=0).unsqueeze(0)
    return qh, kh, vh


def flash_lse_supported(q: torch.Tensor) -> bool:
    """Whether the flash kernel (which returns the log-sum-exp) takes these queries."""
    D = q.shape[-1]
    return (
        hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention")
        and q.dtype in (torch.bfloat16, torch.float16)
        and D % 8 == 0
        and D <= 256
    )


def flash_causal_with_lse(qh, kh, vh, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal flash attention that also returns each row's log-sum-exp of the scaled
    scores: out [1, H, T, D], lse [1, H, T] float32. The public SDPA does not return
    the lse, so this calls the aten op SDPA itself dispatches to (CUDA or CPU)."""
    if qh.is_cuda:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(
            qh, kh, vh, 0.0, True, False, scale=scale
        )[:2]
    else:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            qh, kh, vh, 0.0, True, scale=scale
        )
    return out, lse


def sdpa_causal_sinks(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    scale: float,
    sinks: torch.Tensor,
) -> None:
    """Full causal attention with sinks from one flash kernel call.

    A sink adds exp(sink_h) to each row's softmax denominator, so the result is the
    plain attention output times exp(lse) / (exp(lse) + exp(sink)) = sigmoid(lse - sink),
    lse the row's log-sum-exp. Memory: expanded K/V and the flash output (3 x T x Hq x D)
    and the lse (T x Hq floats); no score matrix.
    """
    qh, kh, vh = _expand_heads(q, k, v)
    o, lse = flash_causal_with_lse(qh, kh, vh, scale)
    keep = torch.sigmoid(lse[0] - sinks.to(torch.float32)[:, None])  # [Hq, T] float32
    out.copy_(o[0].transpose(0, 1))  # [T, Hq, D]
    out.mul_(keep.t()[..., None])  # computed in float32, rounded once into out's dtype


def sdpa_causal(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, *, scale: float
) -> None:
    """Causal SDPA with KV heads expanded to the query heads.

    ``enable_gqa=True`` sent 16k-token prefill to the math kernel, which asks for a full
    T x T score matrix per head (tens of GiB), so K and V are expanded explicitly
    (2 x T x Hq x D extra) and only the flash / memory-efficient kernels are allowed on CUDA.
    """
    qh, kh, vh = _expand_heads(q, k, v)
    if q.is_cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)
    else:
        o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)
    out.copy_(o[0].transpose(0, 1))  # [T, Hq, D]


def chunked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    *,
    scale: float,
    window: int | None,
    sinks: torch.Tensor | None,
    block_q: int,
    tile_elems: int,
) -> None:
    """Causal (optionally windowed, optionally with sinks) attention by blocks.

    Flash-attention's online softmax written in PyTorch, device-agnostic. Queries go in
    blocks of ``block_q`` rows; for each, keys go in blocks of ``block_k`` columns, only
    over the range the block can see ([i - window + 1, i] for a window, [0, i]
    otherwise). Scores and probabilities are float32.

    Memory bound: besides float32 copies of K and V (2 x T x Hkv x D x 4 bytes, 32 MiB at
    16k tokens on gpt-oss-20b) and per-block accumulators (Hq x block_q x D), the live
    score tiles are a few [Hq, block_q, block_k] float32 tensors, with block_k chosen so
    one tile holds at most ``tile_elems`` elements: 64 MiB each by default (Hq = 64,
    block_q = block_k = 512), a few hundred MiB at most whatever T is. No T x T matrix.

    Sinks (gpt-oss): the softmax denominator gains exp(sink_h) per head, so the output is
    acc / (l + exp(sink - m)) with m the running row max and l the running row sum.
    """
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    G = Hq // Hkv
    block_q = max(1, min(block_q, T))
    block_k = max(1, min(T, tile_elems // (Hq * block_q)))
    kf = k.to(torch.float32).permute(1, 2, 0)  # [Hkv, D, T]
    vf = v.to(torch.float32).permute(1, 0, 2).contiguous()  # [Hkv, T, D]
    sink = None
    if sinks is not None:
        sink = sinks.to(torch.float32).view(Hkv, G, 1, 1)
    neg_inf = float("-inf")
    for qs in range(0, T, block_q):
        qe = min(qs + block_q, T)
        bq = qe - qs
        # [bq, Hq, D] -> [Hkv, G * bq, D]: query head h = kv * G + g reads KV head kv
        qf = (
            q[qs:qe]
            .to(torch.float32)
            .view(bq, Hkv, G, D)
            .permute(1, 2, 0, 3)
            .reshape(Hkv, G * bq, D)
        )
        qf = qf * scale  # scale the queries once instead of every score tile (never q in place)
        m = torch.full((Hkv, G * bq, 1), neg_inf, dtype=torch.float32, device=q.device)
        l = torch.zeros((Hkv, G * bq, 1), dtype=torch.float32, device=q.device)
        acc = torch.zeros((Hkv, G * bq, D), dtype=torch.float32, device=q.device)
        k_lo = 0 if window is None else max(0, qs - window + 1)
        for ks in range(k_lo, qe, block_k):
            ke = min(ks + block_k, qe)
            s = torch.bmm(qf, kf[:, :, ks:ke])  # [Hkv, G*bq, bk] scaled scores
            crosses_diagonal = ke - 1 > qs
            leaves_window = window is not None and ks <= qe - 1 - window
            if crosses_diagonal or leaves_window:
                qi = torch.arange(qs, qe, device=q.device)[:, None]
                kj = torch.arange(ks, ke, device=q.device)[None, :]
                blocked = kj > qi  # [bq, bk]
                if window is not None:
                    blocked |= kj <= qi - window
                s.view(Hkv, G, bq, ke - ks).masked_fill_(blocked, neg_inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            # a row that has seen only masked keys so far keeps m = -inf: shift by 0 instead
            m_safe = m_new.masked_fill(m_new == neg_inf, 0.0)
            p = s.sub_(m_safe).exp_()  # [Hkv, G*bq, bk], in place of the scores
            corr = torch.exp(m - m_safe)
            l = l * corr + p.sum(dim=-1, keepdim=True)
            acc = torch.baddbmm(acc * corr, p, vf[:, ks:ke])
            m = m_new
            del s, p
        if sink is not None:
            # every row saw its own diagonal key, so m is finite here
            extra = torch.exp(sink - m.view(Hkv, G, bq, 1)).view(Hkv, G * bq, 1)
            l = l + extra
        o = (acc / l).view(Hkv, G, bq, D).permute(2, 0, 1, 3).reshape(bq, Hq, D)
        out[qs:qe].copy_(o)


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Straightforward T x T attention in float32 (tests and small CPU checks only)."""
    T, Hq, _D = q.shape
    G = Hq // k.shape[1]
    kk = k.float().repeat_interleave(G, dim=1)
    vv = v.float().repeat_interleave(G, dim=1)
    s = torch.einsum("thd,shd->hts", q.float(), kk) * scale  # [Hq, T, T]
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    blocked = j > i
    if window is not None:
        blocked |= j <= i - window
    s = s.masked_fill(blocked.to(s.device), float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.float().view(Hq, 1, 1).expand(Hq, T, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)[..., :T]
    return torch.einsum("hts,shd->thd", p, vv).to(q.dtype)


class Attention(nn.Module):
    """Self-attention with fused QKV: q/k/v projections (optional bias), optional
    per-head RMSNorm on q and k (Qwen3), RoPE, the attention core behind the break,
    output projection. Optional sinks (gpt-oss).

    Under tensor parallelism (``args.tp_size`` > 1) the module holds this rank's heads
    only: ``num_heads`` and ``num_kv_heads`` are the local counts, ``qkv_proj`` holds
    this rank's q, k and v rows, ``o_proj`` this rank's input columns, and the output
    is all-reduced over the ranks.
    """

    def __init__(
        self,
        args: ModelArgs,
        layer_idx: int,
        *,
        sinks: bool = False,
        norm_fp32_weight: bool = False,
    ):
        super().__init__()
        self.layer_idx = layer_idx
        self.tp_rank, self.tp_size = args.tp_rank, args.tp_size
        # head counts derived here, once: the tensor-parallel split divides them
        self.total_heads, self.total_kv_heads = args.num_heads, args.num_kv_heads
        heads = split_heads(args.num_heads, args.num_kv_heads, self.tp_rank, self.tp_size)
        self.num_heads, self.num_kv_heads = heads.num_heads, heads.num_kv_heads  # this rank's
        self.head_start, self.kv_head_start = heads.head_start, heads.kv_head_start
        self.head_dim = args.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        self.window = args.window(layer_idx)
        self.qkv_proj = nn.Linear(
            args.hidden_size, self.q_size + 2 * self.kv_size, bias=args.attention_bias
        )
        self.o_proj = nn.Linear(self.q_size, args.hidden_size, bias=args.attention_bias)
        self.q_norm: RMSNorm | None
        self.k_norm: RMSNorm | None
        if args.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, args.rms_norm_eps, norm_fp32_weight)
            self.k_norm = RMSNorm(self.head_dim, args.rms_norm_eps, norm_fp32_weight)
        else:
            self.q_norm = self.k_norm = None
        self.sinks = nn.Parameter(torch.zeros(self.num_heads)) if sinks else None
        # decode: this layer's (K, V) cache, [seqs, Hkv, context, D] each
        # (bcgprof.models.kvcache.attach)
        self.kv_cache: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Prefill (no cache): T tokens attend to each other. Decode (a cache attached):
        token t of the batch is sequence t's new token at ``positions[t]``; it is written to
        the cache and attends over the sequence's cached tokens."""
        if self.kv_cache is not None:
            assert positions is not None  # decode: the model passes every token's position
            return self._decode(x, cos, sin, positions)
        T = x.shape[0]
        qkv = self.qkv_proj(x)  # [T, (Hq + 2 Hkv) D]  (this rank's heads)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(T, self.num_heads, self.head_dim)  # [T, Hq, D]
        k = k.view(T, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        v = v.view(T, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:  # both or neither (qk_norm)
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        # [T, Hq, D]
        o = attention(q, k, v.contiguous(), scale=self.scale, window=self.window, sinks=self.sinks)
        # [T, hidden]
        return row_parallel_linear(o.view(T, self.q_size), self.o_proj, self.tp_rank, self.tp_size)

    def _decode(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        B = x.shape[0]
        qkv = self.qkv_proj(x)  # [B, (Hq + 2 Hkv) D]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(B, self.num_heads, self.head_dim)  # [B, Hq, D]
        k = k.view(B, self.num_kv_heads, self.head_dim)  # [B, Hkv, D]
        v = v.view(B, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:  # both or neither (qk_norm)
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        assert self.kv_cache is not None  # forward decodes only with a cache attached
        k_cache, v_cache = self.kv_cache
        write_kv(k_cache, v_cache, k, v, positions)  # inside the graph: static shapes, no sync
        # [B, Hq, D]
        o = decode_attention(
            q, k_cache, v_cache, positions, scale=self.scale, window=self.window, sinks=self.sinks
        )
        # [B, hidden]
        return row_parallel_linear(o.view(B, self.q_size), self.o_proj, self.tp_rank, self.tp_size)

    def checkpoint_entries(self, ckpt: str, param: str) -> Iterator[CheckpointTarget]:
        H, q, kv, D = self.qkv_proj.in_features, self.q_size, self.kv_size, self.head_dim
        full_q, full_kv = self.total_heads * D, self.total_kv_heads * D
        q_src = slice(self.head_start * D, self.head_start * D + q)  # this rank's rows of q_proj
        kv_src = slice(self.kv_head_start * D, self.kv_head_start * D + kv)
        bias = self.qkv_proj.bias is not None
        for name, lo, n, full, src in (
            ("q_proj", 0, q, full_q, q_src),
            ("k_proj", q, kv, full_kv, kv_src),
            ("v_proj", q + kv, kv, full_kv, kv_src),
        ):
            shard = src if self.tp_size > 1 else ()
            yield CheckpointTarget(
                f"{ckpt}.{name}.weight",
                f"{param}.qkv_proj.weight",
                (slice(lo, lo + n),),
                (full, H),
                shard and (shard,),
            )
            if bias:
                yield CheckpointTarget(
                    f"{ckpt}.{name}.bias",
                    f"{param}.qkv_proj.bias",
                    (slice(lo, lo + n),),
                    (full,),
                    shard and (shard,),
                )
        cols = (slice(None), q_src) if self.tp_size > 1 else ()
        yield CheckpointTarget(
            f"{ckpt}.o_proj.weight", f"{param}.o_proj.weight", (), (H, full_q), cols
        )
        if self.o_proj.bias is not None:
            yield CheckpointTarget(f"{ckpt}.o_proj.bias", f"{param}.o_proj.bias", (), (H,))
        if self.q_norm is not None:
            for name in ("q_norm", "k_norm"):
                yield CheckpointTarget(
                    f"{ckpt}.{name}.weight", f"{param}.{name}.weight", (), (self.head_dim,)
                )
        if self.sinks is not None:
            heads = (
                (slice(self.head_start, self.head_start + self.num_heads),)
                if self.tp_size > 1
                else ()
            )
            yield CheckpointTarget(
                f"{ckpt}.sinks", f"{param}.sinks", (), (self.total_heads,), heads
            )
