"""Time the fused kernels against bcgprof's old unfused path at the real shapes (GPU only).

    python -m bcgprof.models.kernels.bench [--tokens 16384] [--repeats 10]

For gpt-oss-20b's and Qwen3-30B-A3B's experts (bf16, random weights and routing):
``fused_experts`` (Triton) against the old ``fused_moe`` (gathered rows, ``grouped_mm``,
unfused activation, bias through a gathered copy, gather + sum combine); for
Llama-3.1-8B's dense MLP activation: ``silu_and_mul`` against ``F.silu(gate) * up``.
Each is timed with CUDA events, warm-up first, and the median of the repeats printed with
the peak memory the call allocated above what was allocated before it.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from collections.abc import Callable
from typing import Optional, TypedDict

import torch
import torch.nn.functional as F

from bcgprof.models.kernels import clamped_swiglu, fused_experts, moe_workspace_shapes, silu_and_mul

MIB = float(1 << 20)


class Experts(TypedDict):
    """One model's routed experts: count, top-k, hidden and intermediate sizes, activation, biases,
    and whether the weights are stored transposed ([E, out, in])."""

    E: int
    k: int
    H: int
    I: int
    activation: str
    bias: bool
    transposed: bool


MODELS: dict[str, Experts] = {  # experts of this rank at tp=1
    "gpt-oss-20b": Experts(
        E=32, k=4, H=2880, I=2880, activation="clamped_swiglu", bias=True, transposed=False
    ),
    "Qwen3-30B-A3B": Experts(
        E=128, k=8, H=2048, I=768, activation="silu", bias=False, transposed=True
    ),
}


def _old_moe() -> Optional[Callable]:
    """The stacks' unfused MoE from before these kernels, where this tree still has it (run the
    bench from an older checkout to time both); None otherwise."""
    try:
        moe = importlib.import_module("bcgprof.models.layers.moe")
    except ImportError:
        return None
    return getattr(moe, "fused_moe", None)


def _old_clamped(gate_up: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    # today's gpt_oss.clamped_swiglu, unfused
    gate, up = gate_up[..., 0::2].clamp(max=limit), gate_up[..., 1::2].clamp(min=-limit, max=limit)
    return (up + 1) * (gate * torch.sigmoid(gate * alpha))


def _old_swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def measure(fn: Callable[[], object], repeats: int, warmup: int) -> tuple[float, float]:
    """(median milliseconds, peak MiB allocated above the level before a call)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return statistics.median(times), (torch.cuda.max_memory_allocated() - before) / MIB


def moe_inputs(T: int, E: int, k: int, H: int, I: int, bias: bool, transposed: bool, **_) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).to(torch.bfloat16)

    top, ids = torch.randn(T, E, generator=g, device="cuda").topk(k, dim=-1)
    if transposed:
        w1 = randn(E, 2 * I, H, scale=H**-0.5).transpose(1, 2)
        w2 = randn(E, H, I, scale=I**-0.5).transpose(1, 2)
    else:
        w1, w2 = randn(E, H, 2 * I, scale=H**-0.5), randn(E, I, H, scale=I**-0.5)
    return dict(
        x=randn(T, H),
        topk_ids=ids,
        topk_weights=torch.softmax(top, -1).to(torch.bfloat16),
        w1=w1,
        w2=w2,
        b1=randn(E, 2 * I, scale=0.1) if bias else None,
        b2=randn(E, H, scale=0.1) if bias else None,
    )


def bench_moe(name: str, T: int, repeats: int, warmup: int) -> list[tuple]:
    spec = MODELS[name]
    a = moe_inputs(T, **spec)
    act = spec["activation"]
    fused_moe = _old_moe()
    old_act = (lambda h: _old_clamped(h, 1.702, 7.0)) if act == "clamped_swiglu" else _old_swiglu
    paths = [("fused_experts (Triton)", lambda: fused_experts(**a, activation=act))]
    if fused_moe is not None:
        from bcgprof.models.layers.moe import RoutedExperts

        route = RoutedExperts(a["topk_ids"], a["topk_weights"])
        paths.append(
            (
                "old fused_moe (grouped_mm)",
                lambda: fused_moe(a["x"], route, a["w1"], a["w2"], old_act, a["b1"], a["b2"]),
            )
        )
    rows = []
    for path, fn in paths:
        ms, peak = measure(fn, repeats, warmup)
        rows.append((name, T, path, ms, peak))
    ws = moe_workspace_shapes(T, spec["k"], spec["H"], 2 * spec["I"], spec["I"], spec["E"])
    rows.append(
        (name, T, "predicted workspace (table)", float("nan"), ws.peak_bytes(torch.bfloat16) / MIB)
    )
    return rows


def bench_dense_activation(T: int, repeats: int, warmup: int) -> list[tuple]:
    I = 14336  # Llama-3.1-8B
    gate_up = torch.randn(T, 2 * I, device="cuda", dtype=torch.bfloat16)
    rows = []
    for path, fn in (
        ("silu_and_mul (Triton)", lambda: silu_and_mul(gate_up)),
        ("F.silu(gate) * up", lambda: _old_swiglu(gate_up)),
        ("clamped_swiglu (Triton)", lambda: clamped_swiglu(gate_up, 1.702, 7.0)),
        ("unfused clamped swiglu", lambda: _old_clamped(gate_up, 1.702, 7.0)),
    ):
        ms, peak = measure(fn, repeats, warmup)
        rows.append(("Llama-3.1-8B act", T, path, ms, peak))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    opts = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench needs a CUDA device", file=sys.stderr)
        return 2
    rows = []
    for name in MODELS:
        rows += bench_moe(name, opts.tokens, opts.repeats, opts.warmup)
        torch.cuda.empty_cache()
    rows += bench_dense_activation(opts.tokens, opts.repeats, opts.warmup)
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, "
        f"median of {opts.repeats} after {opts.warmup} warm-up calls"
    )
    print(f"{'model':<18} {'T':>6}  {'path':<28} {'median ms':>10} {'peak MiB':>10}")
    for name, T, path, ms, peak in rows:
        ms_text = "" if ms != ms else f"{ms:.3f}"
        print(f"{name:<18} {T:>6}  {path:<28} {ms_text:>10} {peak:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
