"""The outer-gather/scatter MoE's workspace (``--moe sglang-mxfp4``): every tensor its routing
keeps and its experts allocate, with shape and dtype, as a pure function of the problem size.

It is what SGLang's MXFP4 MoE on Hopper allocates: ``triton_kernel_fused_experts_with_bias``
(preallocated intermediate and output) over OpenAI's ``triton_kernels`` routing and ``matmul_ogs``;
docs/engine-memory.md names the files and revisions read. Shapes at T tokens, top-k of E experts,
hidden H, this rank's intermediate I, ``act`` the activations' dtype, ``pad512(n)`` n rounded up to
a multiple of 512 (the routing's memset block):

==============  ========================  ==================================================
tensor          shape, dtype              holds; alive
==============  ========================  ==================================================
hist            [pad512(E)] int32         rows per expert (first E); routing to block end
combined_indx   [2 T*k] int32             gather then scatter indices; routing to block end
gate_scal       [T*k] act                 routing weights, expert-sorted; routing to block end
token_offs      [5, pad512(E+1)] int32    row 0: rows before each expert; rows 1-4: tiles
                                          before it at BLOCK_M 16, 32, 64, 128; routing to end
block_pid_map   [4, pad512(tiles)] int32  (block << 16 | expert) per tile, -1 past the last;
                                          routing to block end
intermediate    [T*k, I] act              GEMM1 + SwiGLU output; GEMM1 to the experts' return
output          [T, H] act                the sum over k; GEMM1 to the caller
scratch         [T*k, H] act              GEMM2 output before the sum; GEMM2 to the sum
==============  ========================  ==================================================

``tiles`` is the most tiles any BLOCK_M can need (that of 16). The routing's own temporaries (the
top-k values and ids, a few int64 vectors of T*k) are freed before it returns. The experts' peak is
everything above at once, during GEMM2 and the sum; on return only ``output`` (and the routing,
held by the caller) survives. Nothing is O(T x E); nothing copies x or the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

INDEX_DTYPE = torch.int32
BLOCK_MS = (16, 32, 64, 128)  # the tile heights the routing precomputes offsets and maps for
MEMSET_BLOCK = 512
ROUTING = ("hist", "combined_indx", "gate_scal", "token_offs", "block_pid_map")
EXPERTS = ("intermediate", "output", "scratch")
_ACT = ("gate_scal", "intermediate", "output", "scratch")  # the tensors in the activations' dtype


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pad512(n: int) -> int:
    return cdiv(n, MEMSET_BLOCK) * MEMSET_BLOCK


def max_tiles(num_experts: int, rows: int, block_m: int = BLOCK_MS[0]) -> int:
    """The most BLOCK_M-row tiles ``rows`` rows over ``num_experts`` experts can need: one per row
    while rows <= E, else one partial tile per expert plus the whole ones."""
    if rows <= num_experts:
        return rows
    return cdiv(rows - num_experts + 1, block_m) + num_experts - 1


def block_m_for(rows: int, num_experts: int) -> int:
    """Rows per GEMM tile, from the mean rows per expert, clamped to 16..128 (a fixed rule)."""
    per_expert = max(1, rows // max(num_experts, 1))
    return max(BLOCK_MS[0], min(1 << (per_expert - 1).bit_length(), BLOCK_MS[-1]))


@dataclass(frozen=True)
class OgsWorkspace:
    """Shapes of everything the routing keeps and the experts allocate (module docstring)."""

    tokens: int  # T
    top_k: int  # k
    hidden: int  # H
    intermediate_size: int  # I
    num_experts: int  # E
    block_m: int  # the GEMMs' tile height
    hist: tuple[int]
    combined_indx: tuple[int]
    gate_scal: tuple[int]
    token_offs: tuple[int, int]
    block_pid_map: tuple[int, int]
    intermediate: tuple[int, int]
    output: tuple[int, int]
    scratch: tuple[int, int]

    @property
    def rows(self) -> int:
        """T*k: one row per (token, slot) pair."""
        return self.tokens * self.top_k

    @property
    def tiles(self) -> int:
        """Tiles the GEMMs launch at ``block_m`` (programs past the last expert's rows return)."""
        return max_tiles(self.num_experts, self.rows, self.block_m)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Tensor name -> shape, in allocation order (routing, then experts)."""
        return {name: getattr(self, name) for name in ROUTING + EXPERTS}

    def nbytes(self, dtype: torch.dtype) -> dict[str, int]:
        """Tensor name -> bytes, for activations of ``dtype``."""
        sizes = {}
        for name, shape in self.shapes().items():
            n = 1
            for d in shape:
                n *= d
            sizes[name] = n * (dtype.itemsize if name in _ACT else INDEX_DTYPE.itemsize)
        return sizes

    def routing_bytes(self, dtype: torch.dtype) -> int:
        """Bytes the routing keeps for the MoE block (alive through the experts)."""
        return sum(n for name, n in self.nbytes(dtype).items() if name in ROUTING)

    def peak_bytes(self, dtype: torch.dtype, with_routing: bool = True) -> int:
        """Bytes alive together at the experts' peak (GEMM2 and the sum): the three expert
        tensors, plus the routing unless ``with_routing=False``."""
        experts = sum(n for name, n in self.nbytes(dtype).items() if name in EXPERTS)
        return experts + (self.routing_bytes(dtype) if with_routing else 0)


def ogs_workspace_shapes(T: int, k: int, H: int, I: int, E: int) -> OgsWorkspace:
    """The workspace of the outer-gather/scatter MoE over T tokens, top-k of E experts, hidden
    size H and intermediate size I (this rank's share under tensor parallelism)."""
    for name, v in (("T", T), ("k", k), ("H", H), ("I", I), ("E", E)):
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative int, got {v!r}")
    if E >= 1 << 15:
        raise ValueError(f"E = {E}: expert ids are int16 in the routing, so at most 32767 experts")
    rows = T * k
    return OgsWorkspace(
        tokens=T,
        top_k=k,
        hidden=H,
        intermediate_size=I,
        num_experts=E,
        block_m=block_m_for(rows, E),
        hist=(pad512(E),),
        combined_indx=(2 * rows,),
        gate_scal=(rows,),
        token_offs=(len(BLOCK_MS) + 1, pad512(E + 1)),
        block_pid_map=(len(BLOCK_MS), pad512(max_tiles(E, rows))),
        intermediate=(rows, I),
        output=(T, H),
        scratch=(rows, H),
    )
