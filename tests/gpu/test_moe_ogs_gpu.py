"""SGLang's MXFP4 MoE workspace (``--moe sglang-mxfp4``) compiled on a GPU
(``pytest -s tests/gpu -k ogs``).

* The Triton kernels at gpt-oss-20b's expert shape (E 32, top-4, H = I = 2880) against their
  plain-PyTorch reference run on the CPU from the same inputs, and against the fused-bf16 path:
  the bounds tests/models/test_moe_ogs.py derives (three and five bf16 roundings on top of the
  float32 sums). Bit-identical run to run.
* What the experts allocate on the device, read from the caching allocator's peak: exactly the
  workspace ``ogs_workspace_shapes`` names (intermediate, output, scratch), each rounded up to the
  allocator's 512-byte granule, and nothing else.
* A CUDA-graph replay equals an eager run.
"""

from __future__ import annotations

import pytest
import torch

from bcgprof.models.kernels import (
    OgsRouting,
    experts_ogs,
    experts_ogs_reference,
    ogs_routing,
    ogs_workspace_shapes,
    triton_available,
)

from tolerances import close, mlp_terms

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not triton_available(), reason="needs triton")]

BF16 = torch.bfloat16
E, K, H, I = 32, 4, 2880, 2880  # gpt-oss-20b's experts


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _bound(bf16_roundings: int) -> float:
    f32 = close(torch.float32, reduction=mlp_terms(hidden=H, intermediate=I, experts=K))["rtol"]
    return f32 + close(BF16, reduction=bf16_roundings)["rtol"]


def _case(T: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return dict(
        x=torch.randn(T, H, generator=g).to(BF16),
        logits=torch.randn(T, E, generator=g).to(BF16),
        w1=(torch.randn(E, H, 2 * I, generator=g) * 0.02).to(BF16),
        w2=(torch.randn(E, I, H, generator=g) * 0.02).to(BF16),
        b1=(torch.randn(E, 2 * I, generator=g) * 0.1).to(BF16),
        b2=(torch.randn(E, H, generator=g) * 0.1).to(BF16),
    )


def _on(c: dict, device: str) -> dict:
    return {name: t.to(device) for name, t in c.items()}


def _routing_on(logits: torch.Tensor, device: str) -> OgsRouting:
    """The routing computed on the CPU, moved to ``device``: bf16 logits tie often enough that
    CUDA's and the CPU's top-k may pick different experts among equal logits."""
    routing = ogs_routing(logits.cpu(), K)
    return OgsRouting(*(t.to(device) if isinstance(t, torch.Tensor) else t for t in routing))


def _run(c: dict, fn=experts_ogs, device: str = "cpu") -> torch.Tensor:
    routing = _routing_on(c["logits"], device)
    c = _on(c, device)
    return fn(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"])


def _round512(n: int) -> int:
    return (n + 511) // 512 * 512


@pytest.mark.parametrize("T", [1, 37, 512])
def test_triton_on_the_gpu_equals_the_cpu_reference(T):
    c = _case(T, seed=T)
    got = _run(c, device="cuda")
    want = _run(c, fn=experts_ogs_reference)
    assert got.shape == (T, H) and got.dtype == BF16
    assert _rel_err(got, want) <= _bound(3), _rel_err(got, want)
    assert torch.equal(got, _run(c, device="cuda"))  # bit-identical run to run


def test_the_experts_allocate_exactly_the_workspace():
    T = 1024
    c = _on(_case(T, seed=1), "cuda")
    routing = ogs_routing(c["logits"], K)
    experts_ogs(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"])  # compile and warm up
    torch.cuda.synchronize()
    out = None
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = experts_ogs(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"])
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    ws = ogs_workspace_shapes(T, K, H, I, E)
    sizes = ws.nbytes(BF16)
    want = sum(_round512(sizes[name]) for name in ("intermediate", "output", "scratch"))
    assert peak == want, (peak, want, sizes)
    # the output stays, the rest is freed
    assert torch.cuda.memory_allocated() - base == _round512(sizes["output"])
    del out


def test_a_graph_replay_equals_an_eager_run():
    T = 256
    c = _on(_case(T, seed=2), "cuda")
    routing = ogs_routing(c["logits"], K)
    eager = experts_ogs(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        experts_ogs(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"])
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static = experts_ogs(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"])
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(static, eager)
