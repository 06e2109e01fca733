"""Tensor parallelism: every piece of split arithmetic, and the two collectives the forward uses.

The split follows the serving engines (Megatron-style, as vLLM and SGLang do it):

* attention: query heads split evenly over the ranks; KV heads split too when they
  divide by the ranks, otherwise (fewer KV heads than ranks) each rank keeps the one KV
  head its query heads read (replicated). qkv_proj is column-parallel, o_proj
  row-parallel; sinks go with their heads.
* dense MLP: gate_up column-parallel (this rank's slice of the intermediate for gate
  and up), down row-parallel.
* MoE: every rank holds every expert with intermediate / tp columns; the router is
  replicated.
* a row-parallel output's bias is added on rank 0 only, and the partial outputs are
  summed by one all-reduce after the attention output projection and one after the
  MLP/MoE (:func:`tp_all_reduce`), inside the captured graph segments.
* embedding, norms and rotary tables are replicated (no vocab-parallel embedding: the
  stack has no LM head, and the replicated table is what it costs).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bcgprof.errors import ModelConfigError
from bcgprof.models.args import ModelArgs


def check_split(args: ModelArgs, tp_size: int) -> None:
    """Raise one ModelConfigError line if the stack cannot be split over ``tp_size`` ranks."""
    if not isinstance(tp_size, int) or tp_size < 1:
        raise ModelConfigError(f"tensor-parallel size must be a positive integer, got {tp_size!r}")
    if tp_size == 1:
        return
    problems = []
    if args.num_heads % tp_size:
        problems.append(f"num_attention_heads {args.num_heads} is not divisible by {tp_size}")
    if args.num_kv_heads % tp_size and tp_size % args.num_kv_heads:
        problems.append(
            f"num_key_value_heads {args.num_kv_heads} neither divides by {tp_size} nor divides it "
            "(KV heads are split, or replicated when fewer than the ranks)"
        )
    dense = [not m for m in args.moe_layers] if args.moe_layers else [True] * args.num_layers
    if any(dense) and args.intermediate_size % tp_size:
        problems.append(f"intermediate_size {args.intermediate_size} is not divisible by {tp_size}")
    if args.num_experts and any(args.moe_layers) and args.moe_intermediate_size % tp_size:
        problems.append(
            f"expert {args.moe_intermediate_key} {args.moe_intermediate_size} is not divisible "
            f"by {tp_size}"
        )
    if problems:
        raise ModelConfigError(
            f"cannot split the {args.family} stack over {tp_size} tensor-parallel ranks: "
            + "; ".join(problems)
        )


def shard(args: ModelArgs, tp_rank: int, tp_size: int) -> ModelArgs:
    """Set ``args``' place in a tensor-parallel group (rank ``tp_rank`` of ``tp_size``), after
    checking the split works; returns ``args``."""
    check_split(args, tp_size)
    if not 0 <= tp_rank < tp_size:
        raise ModelConfigError(f"tensor-parallel rank {tp_rank} is outside 0..{tp_size - 1}")
    args.tp_rank, args.tp_size = int(tp_rank), int(tp_size)
    return args


def shard_size(n: int, tp_size: int) -> int:
    """This rank's share of ``n`` (n divisible by tp_size)."""
    return n // tp_size


def shard_range(n: int, tp_rank: int, tp_size: int) -> slice:
    """This rank's contiguous 1/tp share of ``n`` (n divisible by tp_size)."""
    part = shard_size(n, tp_size)
    return slice(tp_rank * part, (tp_rank + 1) * part)


class HeadSplit(NamedTuple):
    """One rank's attention heads: its query heads ``[head_start, head_start + num_heads)``
    and KV heads ``[kv_head_start, kv_head_start + num_kv_heads)``."""

    num_heads: int
    num_kv_heads: int
    head_start: int
    kv_head_start: int


def split_heads(num_heads: int, num_kv_heads: int, tp_rank: int, tp_size: int) -> HeadSplit:
    """This rank's query and KV heads: query heads split evenly; KV heads split when they
    divide by the ranks, else the one KV head this rank's query heads read (replicated)."""
    local_heads = shard_size(num_heads, tp_size)
    if num_kv_heads % tp_size == 0:
        local_kv_heads = shard_size(num_kv_heads, tp_size)
        kv_head_start = tp_rank * local_kv_heads
    else:  # fewer KV heads than ranks: keep the one this rank's query heads read
        local_kv_heads = 1
        kv_head_start = tp_rank // (tp_size // num_kv_heads)
    return HeadSplit(local_heads, local_kv_heads, tp_rank * local_heads, kv_head_start)


def tp_all_reduce(x: torch.Tensor, tp_size: int) -> torch.Tensor:
    """Sum ``x`` over the tensor-parallel ranks, in place, and return it.

    A no-op for one rank. Otherwise ``torch.distributed.all_reduce`` on the default
    process group: with NCCL it is an ordinary kernel on the current stream (no host
    synchronisation), so it is captured into the graph segment like any other op.
    """
    if tp_size == 1:
        return x
    import torch.distributed as dist

    dist.all_reduce(x)
    return x


def row_parallel_linear(
    x: torch.Tensor, linear: nn.Linear, tp_rank: int, tp_size: int
) -> torch.Tensor:
    """``linear(x)`` for a row-parallel weight: partial products summed over the ranks,
    the bias added once (by rank 0, before the all-reduce)."""
    if tp_size == 1:
        return linear(x)
    bias = linear.bias if tp_rank == 0 else None
    return tp_all_reduce(F.linear(x, linear.weight, bias), tp_size)
