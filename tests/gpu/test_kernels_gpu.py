"""The fused kernels compiled on a GPU: against the PyTorch references (small odd shapes
and the real gpt-oss-20b / Qwen3-30B-A3B expert shapes), bit-identical run to run, a
CUDA-graph replay equal to an eager run, and the memory the fused MoE allocates equal to
the workspace of bcgprof.models.kernels.workspace (the engine table). Needs CUDA and triton.

Run on the H200 with ``pytest -s tests/gpu/test_kernels_gpu.py`` (-s shows the measured
peaks next to the predicted ones).

Tolerances: float32 runs differ from the reference only by the order of float32 sums and
by Triton's fast exp/sigmoid (relative error < 1e-5). 16-bit runs round the GEMM1 output,
the activation and the GEMM2 output to 16 bits, as the engines do; a float32 difference
in summation order can flip one of those roundings by one unit in the last place, so the
MoE is compared by relative error (whole output < 1e-2 and every token row < 5e-2), the
activations element by element to within one unit in the last place.
"""

from __future__ import annotations

import pytest
import torch

from bcgprof.models.kernels import (
    clamped_swiglu,
    clamped_swiglu_reference,
    fused_experts,
    fused_experts_reference,
    moe_workspace_shapes,
    silu_and_mul,
    silu_and_mul_reference,
    triton_available,
)

# triton is looked up, not imported: collecting this file must not pick its mode
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not triton_available(), reason="needs triton")]

BF16 = torch.bfloat16
DEV = "cuda"
# the real expert shapes: T, E, k, H, I, activation, biases, transposed (Qwen3-MoE's views)
GPT_OSS_20B = dict(
    E=32, k=4, H=2880, I=2880, activation="clamped_swiglu", bias=True, transposed=False
)
QWEN3_30B_A3B = dict(E=128, k=8, H=2048, I=768, activation="silu", bias=False, transposed=True)


@pytest.fixture(autouse=True)
def _exact_float32_matmul():
    # the float32 reference must not use TF32
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def moe_case(
    T, E, k, H, I, activation="silu", bias=False, transposed=False, dtype=BF16, seed=0, empty=()
):
    """Inputs of fused_experts on the GPU with O(1) activations; experts in ``empty`` idle."""
    g = torch.Generator(device=DEV).manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device=DEV) * scale).to(dtype)

    x = randn(T, H)
    logits = torch.randn(T, E, generator=g, device=DEV)
    for e in empty:
        logits[:, e] = -1e9
    top, ids = logits.topk(k, dim=-1)
    weights = torch.softmax(top, dim=-1)
    if transposed:
        w1 = randn(E, 2 * I, H, scale=H**-0.5).transpose(1, 2)
        w2 = randn(E, H, I, scale=I**-0.5).transpose(1, 2)
    else:
        w1 = randn(E, H, 2 * I, scale=H**-0.5)
        w2 = randn(E, I, H, scale=I**-0.5)
    b1 = randn(E, 2 * I, scale=0.1) if bias else None
    b2 = randn(E, H, scale=0.1) if bias else None
    args = dict(
        x=x,
        topk_ids=ids,
        topk_weights=weights,
        w1=w1,
        w2=w2,
        b1=b1,
        b2=b2,
        activation=activation,
        alpha=1.702,
        limit=7.0,
    )
    return args


def assert_moe_close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.isfinite(got).all()
    diff = got.double() - want.double()
    whole = float(diff.norm() / want.double().norm())
    rows = diff.norm(dim=1) / want.double().norm(dim=1).clamp_min(1e-6)
    if want.dtype == torch.float32:
        assert whole < 1e-5, whole
        assert float(rows.max()) < 1e-4, float(rows.max())
    else:
        assert whole < 1e-2, whole
        assert float(rows.max()) < 5e-2, float(rows.max())


def assert_within_one_ulp(got: torch.Tensor, want: torch.Tensor) -> None:
    fi = torch.finfo(want.dtype)
    spacing = want.float().abs() * fi.eps + fi.smallest_normal * fi.eps
    assert ((got.float() - want.float()).abs() <= spacing).all()
    assert (got == want).float().mean() > 0.99


# --------------------------------------------------------------------------- activations


@pytest.mark.parametrize("dtype", [BF16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(1, 14), (333, 2 * 1000), (3, 7, 2 * 130), (4096, 2 * 14336)])
def test_activations_match_the_reference(dtype, shape):
    x = (torch.randn(shape, device=DEV) * 4).to(dtype)
    pairs = (
        (silu_and_mul, silu_and_mul_reference),
        (
            lambda t: clamped_swiglu(t, 1.702, 7.0),
            lambda t: clamped_swiglu_reference(t, 1.702, 7.0),
        ),
    )
    for fused, ref in pairs:
        got, want = fused(x), ref(x)
        assert got.shape == want.shape and got.dtype == dtype and got.is_cuda
        if dtype == torch.float32:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        else:
            assert_within_one_ulp(got, want)
        assert torch.equal(got, fused(x))  # deterministic


def test_activation_allocates_only_its_output():
    x = torch.randn(4096, 2 * 14336, device=DEV, dtype=BF16)
    silu_and_mul(x)  # compile first
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = silu_and_mul(x)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before == y.numel() * y.element_size()


# --------------------------------------------------------------------------- fused MoE vs reference


SMALL = [  # T, E, k, H, I, activation, bias, transposed, dtype, empty experts
    (1, 4, 2, 64, 32, "silu", False, True, BF16, ()),
    (3, 8, 4, 96, 40, "clamped_swiglu", True, False, BF16, (0, 7)),
    (17, 8, 1, 33, 20, "clamped_swiglu", True, False, torch.float32, (2,)),
    (64, 4, 4, 40, 64, "silu", False, True, torch.float16, (3,)),
    (64, 1, 1, 128, 64, "silu", True, False, BF16, ()),
    (300, 16, 2, 200, 136, "clamped_swiglu", True, True, torch.float32, (5, 6)),
    (1000, 8, 2, 256, 128, "silu", True, False, BF16, (1,)),
]


@pytest.mark.parametrize("T, E, k, H, I, activation, bias, transposed, dtype, empty", SMALL)
def test_fused_experts_matches_the_reference(
    T, E, k, H, I, activation, bias, transposed, dtype, empty
):
    args = moe_case(T, E, k, H, I, activation, bias, transposed, dtype, seed=T + E, empty=empty)
    got = fused_experts(**args)
    assert_moe_close(got, fused_experts_reference(**args))
    assert torch.equal(got, fused_experts(**args))


@pytest.mark.parametrize(
    "model, T",
    [(GPT_OSS_20B, 2048), (QWEN3_30B_A3B, 1024), (GPT_OSS_20B, 5)],
    ids=["gpt-oss-20b-T2048", "qwen3-30b-a3b-T1024", "gpt-oss-20b-T5"],
)
def test_fused_experts_at_real_expert_shapes(model, T):
    args = moe_case(T=T, **model)
    got = fused_experts(**args)
    assert_moe_close(got, fused_experts_reference(**args))
    runs = [fused_experts(**args) for _ in range(2)]
    assert all(torch.equal(got, r) for r in runs)  # bit-identical run to run


# --------------------------------------------------------------------------- capture


@pytest.mark.parametrize(
    "model", [GPT_OSS_20B, QWEN3_30B_A3B], ids=["gpt-oss-20b", "qwen3-30b-a3b"]
)
def test_graph_replay_equals_an_eager_run(model):
    T = 1024
    args = moe_case(T=T, **model, seed=1)
    fresh = moe_case(T=T, **model, seed=2)  # new inputs, same weights below
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # compile and warm up outside the capture
        fused_experts(**args)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fused_experts(**args)
    for name in ("x", "topk_ids", "topk_weights"):  # the graph reads these buffers
        args[name].copy_(fresh[name])
    graph.replay()
    torch.cuda.synchronize()
    eager = fused_experts(**args)
    assert torch.equal(captured, eager)
    assert_moe_close(captured, fused_experts_reference(**args))
    graph.replay()  # and again: the same bits
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


def test_activation_graph_replay_equals_an_eager_run():
    x = torch.randn(512, 2 * 2880, device=DEV, dtype=BF16)
    clamped_swiglu(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = clamped_swiglu(x)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, clamped_swiglu(x))


# --------------------------------------------------------------------------- memory


@pytest.mark.parametrize("in_place", [False, True], ids=["new-output", "out=x"])
@pytest.mark.parametrize(
    "model", [GPT_OSS_20B, QWEN3_30B_A3B], ids=["gpt-oss-20b", "qwen3-30b-a3b"]
)
def test_fused_experts_allocates_the_predicted_workspace(model, in_place):
    T = 4096
    args = moe_case(T=T, **model)
    # compile and create anything made once per process, so the measured call only runs
    for _ in range(2):
        fused_experts(**args, out=args["x"].clone() if in_place else None)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    stats_before = torch.cuda.memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=10_000)
    try:
        out = fused_experts(**args, out=args["x"] if in_place else None)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        kept = torch.cuda.memory_allocated() - before
        stats_after = torch.cuda.memory_stats()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    # what the call allocated and still holds, with where it was allocated (for a failure message)
    live: dict = {}
    for trace in snapshot["device_traces"]:
        for e in trace:
            if e["action"] == "alloc":
                live[e["addr"]] = (
                    e["size"],
                    [
                        f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']}:{f['name']}"
                        for f in e["frames"]
                        if f["filename"].endswith(".py")
                    ][:6],
                )
            elif e["action"] in ("free_requested", "free_completed"):
                live.pop(e["addr"], None)
    held = list(live.values())
    moved = {
        k: v - stats_before.get(k, 0)
        for k, v in stats_after.items()
        if ".current" in k and v != stats_before.get(k, 0)
    }
    E, k, H, I = model["E"], model["k"], model["H"], model["I"]
    ws = moe_workspace_shapes(T, k, H, 2 * I, I, E)
    want = ws.peak_bytes(BF16, with_output=not in_place)
    print(
        f"\n{model['activation']} E={E} k={k} H={H} I={I} T={T} in_place={in_place}: peak {peak} "
        "B, "
        f"predicted {want} B ({ws.nbytes(BF16)}), kept {kept} B"
    )
    assert abs(peak - want) <= 0.02 * want
    # only the output outlives the call, in bytes requested: the allocator hands out a cached block
    # whole when splitting it would leave 1 MiB or less, and memory_allocated counts the whole block
    kept_requested = (
        stats_after["requested_bytes.all.current"] - stats_before["requested_bytes.all.current"]
    )
    assert kept_requested == (0 if in_place else out.numel() * out.element_size()), (held, moved)
    assert 0 <= kept - kept_requested <= 1 << 20


def test_fused_experts_in_place_equals_a_new_output():
    args = moe_case(T=777, **GPT_OSS_20B)
    want = fused_experts(**args)
    x = args["x"].clone()
    got = fused_experts(**{**args, "x": x}, out=x)
    assert got is x and torch.equal(got, want)
