"""Fused, engine-faithful MLP activations and MoE: what bcgprof's layer stacks allocate
is what SGLang's and vLLM's fused kernels allocate (docs-engine-memory.md has the
derivation and the tables).

The memory rule, which the rest of bcgprof relies on (shapes at T tokens, top-k of E
experts, hidden H, intermediate I of this rank, N1 = 2I):

* Gated activations (:func:`silu_and_mul`, :func:`clamped_swiglu`): ``[M, 2I] -> [M, I]``;
  the output is the only allocation. A dense MLP therefore holds, at its peak, the
  gate/up projection [T, 2I] and the activation [T, I] together (then the activation
  and the down projection's output [T, H]).
* Fused MoE (:func:`fused_experts`): allocates exactly :func:`moe_workspace_shapes` --
  routing metadata (int32: sorted_ids [T*k + E*(BM-1)], expert_ids [cdiv(that, BM)],
  num_tokens_post_padded [1]), then ``cache13`` [T*k * max(N1, H)], ``output`` [T, H]
  (not allocated when the caller passes ``out=``, e.g. ``out=x`` as SGLang's default
  in-place MoE does), ``cache2`` [T*k, I]. All are alive together from the second GEMM to
  the return (the peak, :meth:`MoEWorkspace.peak_bytes`); afterwards only ``output`` is. Nothing is
  O(T x E), nothing copies x or the weights, biases and routing weights are applied
  inside the GEMMs. The router's logits and top-k tensors are the caller's.
* MXFP4 experts (:func:`fused_experts_mxfp4`, gpt-oss's ``*_blocks`` / ``*_scales`` kept
  packed): the same workspace, byte for byte; the weights are decoded in registers inside
  the GEMMs, never into a tensor.
* Outer-gather/scatter MoE (:func:`experts_ogs`, :func:`experts_ogs_mxfp4`; ``--moe
  sglang-mxfp4``): SGLang's MXFP4 path for gpt-oss on Hopper. :func:`ogs_routing` keeps the
  expert-sorted routing of :func:`ogs_workspace_shapes`; the experts allocate ``intermediate``
  [T*k, I] (GEMM1 with the SwiGLU in its epilogue), ``output`` [T, H] and, for GEMM2 and the sum
  over k, ``scratch`` [T*k, H] (:meth:`OgsWorkspace.peak_bytes`).
* Determinism: no atomics, no split-K, fixed launch configurations (no autotuning); a
  CUDA-graph replay equals an eager run bit for bit.

Paths: Triton kernels for CUDA tensors; the meta device allocates the same tensors and
launches nothing; other devices (CPU) run the ``*_reference`` functions, plain PyTorch with
the same math and rounding points, which allocate freely. ``backend="triton"`` forces the
kernels (on CPU only under ``TRITON_INTERPRET=1``), ``backend="reference"`` the reference.
"""

from bcgprof.models.kernels._backend import triton_available
from bcgprof.models.kernels.activation import (
    clamped_swiglu,
    clamped_swiglu_reference,
    silu_and_mul,
    silu_and_mul_reference,
)
from bcgprof.models.kernels.moe import (
    ACTIVATIONS,
    fused_experts,
    fused_experts_mxfp4,
    fused_experts_reference,
)
from bcgprof.models.kernels.moe_ogs import experts_ogs, experts_ogs_mxfp4, experts_ogs_reference
from bcgprof.models.kernels.ogs_routing import OgsRouting, ogs_routing
from bcgprof.models.kernels.ogs_workspace import OgsWorkspace, ogs_workspace_shapes
from bcgprof.models.kernels.workspace import MoEWorkspace, moe_workspace_shapes

__all__ = [
    "ACTIVATIONS",
    "MoEWorkspace",
    "OgsRouting",
    "OgsWorkspace",
    "clamped_swiglu",
    "clamped_swiglu_reference",
    "experts_ogs",
    "experts_ogs_mxfp4",
    "experts_ogs_reference",
    "fused_experts",
    "fused_experts_mxfp4",
    "fused_experts_reference",
    "moe_workspace_shapes",
    "ogs_routing",
    "ogs_workspace_shapes",
    "silu_and_mul",
    "silu_and_mul_reference",
    "triton_available",
]
