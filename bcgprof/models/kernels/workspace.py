"""The fused MoE's workspace: every tensor :func:`~bcgprof.models.kernels.moe.fused_experts`
allocates, with its shape, as a pure function of the problem size.

``fused_experts`` allocates exactly these (on CUDA and on the meta device), so this is
also what a memory table or a prediction may count on. All of them are alive together
from the second GEMM to the end of the call (the MoE's peak); on return only ``output``
survives. Routing metadata is int32, the rest has the activations' dtype.

=========================  =======================  =========================================
tensor                     shape                    what it holds
=========================  =======================  =========================================
sorted_ids                 [T*k + E*(BM-1)]         (token, slot) rows grouped by expert, each
                                                    expert padded to a multiple of BM
expert_ids                 [cdiv(len, BM)]          the expert of each BM-row tile
num_tokens_post_padded     [1]                      rows in use in sorted_ids
cache13                    [T*k * max(N1, H)]       GEMM1 output [T*k, N1], later GEMM2 output
                                                    [T*k, H]: two views of one buffer
cache2                     [T*k, I]                 the activation's output, GEMM2's input
output                     [T, H]                   the sum over the k slots (absent when the
                                                    caller passes ``out=``)
=========================  =======================  =========================================

(When T*k < E, sorted_ids is at most T*k*BM long: only T*k experts can hold a row.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

METADATA_DTYPE = torch.int32


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_m_for(rows: int, num_experts: int) -> int:
    """Rows per GEMM tile, from the mean rows per expert (a fixed rule, no tuning): small
    tiles waste little padding on small batches, 128 keeps Hopper busy on large ones."""
    per_expert = rows / max(num_experts, 1)
    if per_expert <= 16:
        return 16
    if per_expert <= 64:
        return 32
    if per_expert <= 512:
        return 64
    return 128


@dataclass(frozen=True)
class MoEWorkspace:
    """Shapes of everything one fused_experts call allocates (see the module docstring)."""

    tokens: int  # T
    top_k: int  # k
    hidden: int  # H
    n1: int  # N1 = 2I, GEMM1's output columns
    intermediate: int  # I
    num_experts: int  # E
    block_m: int  # BM, rows per tile
    sorted_ids: tuple[int]
    expert_ids: tuple[int]
    num_tokens_post_padded: tuple[int]
    cache13: tuple[int]
    cache2: tuple[int, int]
    output: tuple[int, int]

    @property
    def rows(self) -> int:
        """T*k: one row per (token, slot) pair."""
        return self.tokens * self.top_k

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Tensor name -> shape, in the order fused_experts allocates them."""
        return {
            "sorted_ids": self.sorted_ids,
            "expert_ids": self.expert_ids,
            "num_tokens_post_padded": self.num_tokens_post_padded,
            "cache13": self.cache13,
            "output": self.output,
            "cache2": self.cache2,
        }

    def nbytes(self, dtype: torch.dtype) -> dict[str, int]:
        """Tensor name -> bytes, for activations of ``dtype``."""
        sizes = {}
        for name, shape in self.shapes().items():
            n = 1
            for d in shape:
                n *= d
            item = (
                METADATA_DTYPE.itemsize
                if name in ("sorted_ids", "expert_ids", "num_tokens_post_padded")
                else dtype.itemsize
            )
            sizes[name] = n * item
        return sizes

    def peak_bytes(self, dtype: torch.dtype, with_output: bool = True) -> int:
        """Bytes alive together at the MoE's peak: all of the workspace, the output
        included unless the caller provides it (``with_output=False``: ``out=``)."""
        return sum(n for name, n in self.nbytes(dtype).items() if with_output or name != "output")


def moe_workspace_shapes(T: int, k: int, H: int, N1: int, I: int, E: int) -> MoEWorkspace:
    """The workspace of a fused MoE over T tokens, top-k of E experts, hidden size H,
    GEMM1 output width N1 (= 2I) and intermediate size I (this rank's share under
    tensor parallelism)."""
    for name, v in (("T", T), ("k", k), ("H", H), ("N1", N1), ("I", I), ("E", E)):
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    rows = T * k
    bm = block_m_for(rows, E)
    padded = rows + E * (bm - 1)
    if rows < E:  # at most `rows` experts hold a row, each padded to one tile
        padded = min(padded, rows * bm)
    return MoEWorkspace(
        tokens=T,
        top_k=k,
        hidden=H,
        n1=N1,
        intermediate=I,
        num_experts=E,
        block_m=bm,
        sorted_ids=(padded,),
        expert_ids=(cdiv(padded, bm),),
        num_tokens_post_padded=(1,),
        cache13=(rows * max(N1, H),),
        cache2=(rows, I),
        output=(T, H),
    )
