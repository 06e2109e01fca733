"""gpt-oss's MXFP4 experts kept packed, compiled on a GPU (``pytest -s tests/gpu -k packed``).

* The packed fused MoE at gpt-oss-20b's expert shape (E 32, top-4, H = I = 2880) and a few
  token counts against the bf16 fused MoE run on the weights ``mxfp4.dequantize_mxfp4`` gives
  (exact in bf16): the same products, float32 sums in another order, so at most a flipped bf16
  rounding at each of the four rounding points (tests/models/test_packed_experts.py derives the
  bound).
* No bf16 copy of an expert weight: building a packed gpt-oss-20b expert layer allocates the packed
  bytes and nothing near the bf16 size, and a forward allocates exactly what the bf16 fused MoE
  allocates (the same workspace), byte for byte.
* A CUDA-graph replay equals an eager run.
"""

from __future__ import annotations

import pytest
import torch

from bcgprof.models.kernels import (
    fused_experts,
    fused_experts_mxfp4,
    moe_workspace_shapes,
    triton_available,
)
from bcgprof.models.mxfp4 import DUMMY_SCALES, dequantize_mxfp4

from tolerances import close, mlp_terms

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not triton_available(), reason="needs triton")]

BF16 = torch.bfloat16
DEV = "cuda"
E, K_TOP, H, I = 32, 4, 2880, 2880  # gpt-oss-20b's experts


def packed_case(T: int, seed: int = 0, dtype=BF16) -> dict:
    g = torch.Generator(device=DEV).manual_seed(seed)
    lo, hi = DUMMY_SCALES
    top, ids = torch.randn(T, E, generator=g, device=DEV).topk(K_TOP, dim=-1)
    return dict(
        x=torch.randn(T, H, generator=g, device=DEV).to(dtype),
        topk_ids=ids,
        topk_weights=torch.softmax(top, -1),
        w1_blocks=torch.randint(
            0, 256, (E, 2 * I, H // 32, 16), dtype=torch.uint8, generator=g, device=DEV
        ),
        w1_scales=torch.randint(
            lo, hi + 1, (E, 2 * I, H // 32), dtype=torch.uint8, generator=g, device=DEV
        ),
        w2_blocks=torch.randint(
            0, 256, (E, H, I // 32, 16), dtype=torch.uint8, generator=g, device=DEV
        ),
        w2_scales=torch.randint(
            lo, hi + 1, (E, H, I // 32), dtype=torch.uint8, generator=g, device=DEV
        ),
        b1=(torch.randn(E, 2 * I, generator=g, device=DEV) * 0.1).to(dtype),
        b2=(torch.randn(E, H, generator=g, device=DEV) * 0.1).to(dtype),
    )


def dequantised(case: dict) -> dict:
    dtype = case["x"].dtype
    return dict(
        x=case["x"],
        topk_ids=case["topk_ids"],
        topk_weights=case["topk_weights"],
        w1=dequantize_mxfp4(case["w1_blocks"], case["w1_scales"], dtype=dtype),
        w2=dequantize_mxfp4(case["w2_blocks"], case["w2_scales"], dtype=dtype),
        b1=case["b1"],
        b2=case["b2"],
    )


def bound(dtype: torch.dtype) -> float:
    f32 = close(torch.float32, reduction=mlp_terms(hidden=H, intermediate=I, experts=K_TOP))["rtol"]
    return f32 if dtype == torch.float32 else f32 + close(BF16, reduction=4)["rtol"]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.mark.parametrize("T", [1, 37, 2048, 16384])
def test_packed_equals_bf16_at_gpt_oss_20b_shape(T):
    case = packed_case(T, seed=T)
    got = fused_experts_mxfp4(**case)
    want = fused_experts(**dequantised(case), activation="clamped_swiglu")
    err = rel_err(got, want)
    print(
        f"T={T}: relative difference {err:.2e} (bound {bound(BF16):.2e}), equal bits: "
        f"{torch.equal(got, want)}"
    )
    assert torch.isfinite(got).all() and err <= bound(BF16)
    assert torch.equal(got, fused_experts_mxfp4(**case))  # run to run


def test_packed_equals_float32_on_dequantised_weights():
    torch.backends.cuda.matmul.allow_tf32 = False
    case = packed_case(300, seed=1, dtype=torch.float32)
    got = fused_experts_mxfp4(**case)
    want = fused_experts(**dequantised(case), activation="clamped_swiglu")
    assert rel_err(got, want) <= bound(torch.float32), rel_err(got, want)


def test_packed_layer_never_holds_bf16_expert_weights():
    from bcgprof.models import build_meta
    from bcgprof.models.gpt_oss import GptOssPackedExperts
    from bcgprof.models.layers.moe import RoutedExperts
    from bcgprof.models.weights import init_dummy

    bf16_bytes = E * 3 * I * H * 2  # gate_up [H, 2I] and down [I, H] of every expert, in bf16
    packed_bytes = E * 3 * I * H * 17 // 32 + (E * 2 * I + E * H) * 2  # blocks, scales, biases
    args = build_meta("gpt-oss-20b", num_layers=1, experts="packed").args
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.device("meta"):
        meta = GptOssPackedExperts(args)
    layer = meta.to(dtype=BF16).to_empty(device=DEV)
    init_dummy(layer, seed=0)
    torch.cuda.synchronize()
    held, peak = torch.cuda.memory_allocated() - base, torch.cuda.max_memory_allocated() - base
    print(
        f"packed expert layer: holds {held / 2**20:.1f} MiB, build peak {peak / 2**20:.1f} MiB; "
        f"bf16 experts {bf16_bytes / 2**20:.1f} MiB"
    )
    # the caching allocator hands a large request its whole 2 MiB-rounded block when the rest is
    # under 1 MiB (it splits only larger remainders): at most 2 MiB more per tensor, six tensors
    assert packed_bytes <= held <= packed_bytes + 6 * (2 << 20)
    assert peak < bf16_bytes / 3 and peak <= held + (1 << 20)

    # a forward allocates the fused MoE's workspace and nothing else, as the bf16 path does
    T = 16384
    g = torch.Generator(device=DEV).manual_seed(0)
    x = torch.randn(T, H, generator=g, device=DEV).to(BF16)
    top, ids = torch.randn(T, E, generator=g, device=DEV).topk(K_TOP, dim=-1)
    route = RoutedExperts(ids, torch.softmax(top, -1))

    def forward_peak(fn) -> int:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before

    packed_peak = forward_peak(lambda: layer(x.clone(), route))
    w1 = dequantize_mxfp4(layer.gate_up_proj_blocks, layer.gate_up_proj_scales)
    w2 = dequantize_mxfp4(layer.down_proj_blocks, layer.down_proj_scales)

    def bf16_forward() -> None:
        xc = x.clone()  # in place, as the packed layer writes over its input
        fused_experts(
            xc,
            ids,
            route.weights,
            w1,
            w2,
            "clamped_swiglu",
            layer.gate_up_proj_bias,
            layer.down_proj_bias,
            out=xc,
        )

    bf16_peak = forward_peak(bf16_forward)
    ws = moe_workspace_shapes(T, K_TOP, H, 2 * I, I, E).peak_bytes(BF16, with_output=False)
    print(
        f"forward at {T} tokens: packed peak {packed_peak / 2**20:.1f} MiB, bf16 "
        f"{bf16_peak / 2**20:.1f} MiB, "
        f"workspace {ws / 2**20:.1f} MiB"
    )
    # the same allocations (both with their clone of x as the output)
    assert packed_peak == bf16_peak
    # above the workspace and the clone of x: routing temporaries and block rounding, under the
    # bf16 gate_up_proj of a single expert (H * 2I * 2 bytes, 31.6 MiB)
    assert packed_peak - ws - T * H * 2 < 16 << 20 < H * 2 * I * 2


def test_packed_graph_replay_equals_an_eager_run():
    case = packed_case(512, seed=2)
    eager = fused_experts_mxfp4(**case)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fused_experts_mxfp4(**case)  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_experts_mxfp4(**case)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
