"""SGLang's MXFP4 MoE workspace (``--moe sglang-mxfp4``: bcgprof.models.kernels.moe_ogs) on the CPU.

* The routing: triton_kernels' expert-sorted layout from the router's logits, sync-free.
* The live set: what the routing keeps and what the experts hold at their peak, counted by a
  CPU allocation counter (each created storage's bytes, until it is freed), on the meta device
  at gpt-oss's real sizes and under Triton's interpreter at small ones, against the workspace
  shapes and the bytes docs/engine-memory.md gives.
* The kernels under Triton's interpreter: equal to the reference, to the fused-bf16 path, packed
  weights to bf16 ones, bit-identical run to run, at every tile height.
* The model, the CLI option and run.json.

Tolerances (tests/tolerances.py; compared as norms, relative error over all elements, as the
other kernel tests compare). Every path accumulates in float32 from the same inputs; the float32
part is ``2 * gamma(n)`` relative to the terms, n the rounded terms along the MoE (``mlp_terms``).
In bf16 the paths round at these points: fused-bf16 at GEMM1's output, the SwiGLU, GEMM2's output
and the sum over k; this backend at the SwiGLU (applied to GEMM1's float32 result, as matmul_ogs'
fused activation is), GEMM2's output and the sum. Each rounding is within 2^-8 relative. The
fused path's extra rounding feeds the SwiGLU, which scales a relative error of its gate by at most
``1 + max_x x (1 - sigmoid(x)) < 1.3``: counted twice, the fused path is within gamma(5) of the
exact result and this one within gamma(3), so the two differ by at most ``close(bf16,
reduction=5)`` (2 gamma(5)). This backend's Triton path and its reference round at the same three
points: ``close(bf16, reduction=3)``. Packed MXFP4 weights are compared with the weights
:mod:`bcgprof.models.mxfp4` dequantises from them, which are exact in bf16 and float32 (two
significant bits times a power of two), so FP4's own precision (eps 2^-1) never enters a bound:
the paths multiply the same numbers.
"""

from __future__ import annotations

import gc
import json
import os

import torch

# tests/conftest.py does this first; here for running the file alone
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from typer.testing import CliRunner

from bcgprof.errors import ModelConfigError
from bcgprof.models import build_meta, load, model_class
from bcgprof.models.kernels import (
    experts_ogs,
    experts_ogs_mxfp4,
    experts_ogs_reference,
    fused_experts,
    fused_experts_reference,
    moe_workspace_shapes,
    ogs_routing,
    ogs_workspace_shapes,
)
from bcgprof.models.kernels import ogs_workspace as ogs_workspace_module
from bcgprof.models.kernels.ogs_workspace import BLOCK_MS, max_tiles
from bcgprof.models.mxfp4 import DUMMY_SCALES, dequantize_mxfp4
from bcgprof.options import SGLANG_MXFP4_FAMILIES
from bcgprof.spec import family_names

from .meta_forward import Live
from .test_kernels import Watch
from .test_models_tiny import close as model_forward_close
from .test_models_tiny import inputs, tiny_config, write_config
from helpers import refused
from tolerances import close, mlp_terms

BF16 = torch.bfloat16
I32 = torch.int32


def _interpreter_problem() -> str | None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        return "needs TRITON_INTERPRET=1 (set by this module when there is no CUDA device)"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "triton is not installed"
    from bcgprof.models.kernels import _triton_moe_ogs

    if type(_triton_moe_ogs._gemm2_kernel).__name__ != "InterpretedFunction":
        return "triton was imported before TRITON_INTERPRET was set (tests/conftest.py sets it)"
    return None


_PROBLEM = _interpreter_problem()
interpreted = pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def bound(dtype: torch.dtype, H: int, I: int, k: int, bf16_roundings: int) -> float:
    """The relative difference allowed between two of the paths (module docstring)."""
    f32 = close(torch.float32, reduction=mlp_terms(hidden=H, intermediate=I, experts=k))["rtol"]
    return f32 if dtype == torch.float32 else f32 + close(BF16, reduction=bf16_roundings)["rtol"]


def case(T=17, E=8, k=2, H=40, I=24, dtype=BF16, bias=True, seed=0, empty=()):
    """Random activations, logits (experts in ``empty`` never chosen), bf16-layout experts."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, E, generator=g)
    for e in empty:
        logits[:, e] = -1e4
    return dict(
        x=torch.randn(T, H, generator=g).to(dtype),
        logits=logits.to(dtype),
        k=k,
        w1=(torch.randn(E, H, 2 * I, generator=g) * 0.3).to(dtype),
        w2=(torch.randn(E, I, H, generator=g) * 0.3).to(dtype),
        b1=torch.randn(E, 2 * I, generator=g).to(dtype) if bias else None,
        b2=torch.randn(E, H, generator=g).to(dtype) if bias else None,
    )


def packed(E, H, I, seed=0):
    """Random MXFP4 experts (scales in the dummy range)."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = DUMMY_SCALES
    return dict(
        w1_blocks=torch.randint(0, 256, (E, 2 * I, H // 32, 16), dtype=torch.uint8, generator=g),
        w1_scales=torch.randint(lo, hi + 1, (E, 2 * I, H // 32), dtype=torch.uint8, generator=g),
        w2_blocks=torch.randint(0, 256, (E, H, I // 32, 16), dtype=torch.uint8, generator=g),
        w2_scales=torch.randint(lo, hi + 1, (E, H, I // 32), dtype=torch.uint8, generator=g),
    )


def run(c: dict, fn=experts_ogs, **kw) -> torch.Tensor:
    routing = ogs_routing(c["logits"], c["k"])
    return fn(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"], **kw)


def fused(c: dict, **kw) -> torch.Tensor:
    """The fused-bf16 path on the same routing (torch.topk, softmax over the k chosen)."""
    top, ids = c["logits"].topk(c["k"], dim=-1)
    return fused_experts_reference(
        c["x"],
        ids,
        torch.softmax(top, dim=-1),
        c["w1"],
        c["w2"],
        "clamped_swiglu",
        c["b1"],
        c["b2"],
        **kw,
    )


# --------------------------------------------------------------------------- routing


def test_routing_sorts_rows_by_expert_as_triton_kernels_lays_them_out():
    T, E, k = 37, 4, 2
    logits = torch.randn(T, E, generator=torch.Generator().manual_seed(5))
    logits[:, 3] -= 100  # expert 3 gets no row
    r = ogs_routing(logits, k)
    top, ids = logits.topk(k, dim=-1)
    flat = ids.reshape(-1)
    rows = T * k
    assert r.gather_indx.dtype == r.scatter_indx.dtype == r.hist.dtype == I32
    # sorted by expert, stable (row order within an expert), and the two index vectors invert
    assert r.gather_indx.tolist() == sorted(range(rows), key=lambda i: (int(flat[i]), i))
    assert torch.equal(r.scatter_indx[r.gather_indx.long()], torch.arange(rows, dtype=I32))
    assert torch.equal(r.gate_scal, torch.softmax(top, dim=-1).reshape(-1)[r.gather_indx.long()])
    hist = [int((flat == e).sum()) for e in range(E)]
    assert r.hist.tolist() == hist and hist[3] == 0
    assert r.token_offs_raw.tolist() == [0, *torch.tensor(hist).cumsum(0).tolist()]
    for i, bm in enumerate(BLOCK_MS):
        tiles = [-(-h // bm) for h in hist]
        assert r.token_offs_pad[i].tolist() == [0, *torch.tensor(tiles).cumsum(0).tolist()]
        want = [(b << 16) | e for e in range(E) for b in range(tiles[e])]
        got = r.tile_map(bm).tolist()
        assert len(got) == max_tiles(E, rows) and got == want + [-1] * (len(got) - len(want))


def test_routing_keeps_exactly_the_workspace_tensors_and_is_sync_free():
    T, E, k = 300, 16, 4
    logits = torch.randn(T, E)
    watch = Watch()
    with watch:
        r = ogs_routing(logits, k)
    assert watch.forbidden == []
    ws = ogs_workspace_shapes(T, k, 8, 8, E)
    kept = {
        "hist": r.hist,
        "combined_indx": r.gather_indx,
        "gate_scal": r.gate_scal,
        "token_offs": r.token_offs_raw,
        "block_pid_map": r.block_pid_map,
    }
    assert r.gather_indx.untyped_storage().data_ptr() == r.scatter_indx.untyped_storage().data_ptr()
    assert (
        r.token_offs_raw.untyped_storage().data_ptr()
        == r.token_offs_pad.untyped_storage().data_ptr()
    )
    for name, t in kept.items():
        assert t.untyped_storage().nbytes() == ws.nbytes(logits.dtype)[name], name
    assert torch.equal(ogs_routing(logits, k).gather_indx, r.gather_indx)  # deterministic


def test_routing_checks_its_arguments():
    with pytest.raises(ValueError, match="top_k"):
        ogs_routing(torch.randn(3, 4), 5)
    with pytest.raises(ValueError, match="floating"):
        ogs_routing(torch.zeros(3, 4, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="int16"):
        ogs_workspace_shapes(4, 2, 8, 8, 1 << 15)


# --------------------------------------------------------------------------- the live set


def _meta(T, E, k, H, I, dtype=BF16):
    empty = lambda *shape, dt=dtype: torch.empty(*shape, dtype=dt, device="meta")  # noqa: E731
    return dict(
        x=empty(T, H),
        logits=empty(T, E),
        k=k,
        w1=empty(E, H, 2 * I),
        w2=empty(E, I, H),
        b1=empty(E, 2 * I),
        b2=empty(E, H),
    )


# docs/engine-memory.md, the sglang-mxfp4 table: gpt-oss-20b at 16384 tokens (k 4, H = I = 2880, E
# 32)
DOCS_20B = {
    "hist": 2_048,
    "combined_indx": 524_288,
    "gate_scal": 131_072,
    "token_offs": 10_240,
    "block_pid_map": 73_728,
    "intermediate": 377_487_360,
    "output": 94_371_840,
    "scratch": 377_487_360,
}


def test_workspace_bytes_are_the_docs_table():
    ws = ogs_workspace_shapes(16384, 4, 2880, 2880, 32)
    assert ws.nbytes(BF16) == DOCS_20B
    assert ws.routing_bytes(BF16) == 741_376
    assert ws.peak_bytes(BF16, with_routing=False) == 849_346_560
    assert ws.peak_bytes(BF16) == 850_087_936
    # gpt-oss-120b (128 experts): the same bytes but the experts' histogram and tile map
    big = ogs_workspace_shapes(16384, 4, 2880, 2880, 128)
    assert big.nbytes(BF16) == DOCS_20B and big.peak_bytes(BF16) == 850_087_936
    # fused-bf16 at the same size (its output written over x): the docs' comparison
    fused_ws = moe_workspace_shapes(16384, 4, 2880, 5760, 2880, 32)
    assert fused_ws.peak_bytes(BF16, with_output=False) == 1_132_742_660
    assert fused_ws.peak_bytes(BF16, with_output=False) - ws.peak_bytes(BF16) == 282_654_724


@pytest.mark.parametrize("E", [32, 128])
@pytest.mark.parametrize("weights", ["bf16", "packed"])
def test_meta_live_set_at_16k_is_the_workspace(E, weights):
    # on the meta device the Triton path's allocations run, nothing launches: the real sizes
    T, k, H, I = 16384, 4, 2880, 2880
    c = _meta(T, E, k, H, I)
    ws = ogs_workspace_shapes(T, k, H, I, E)
    p = {
        name: torch.empty(*shape, dtype=torch.uint8, device="meta")
        for name, shape in (  # MXFP4 experts
            ("w1_blocks", (E, 2 * I, H // 32, 16)),
            ("w1_scales", (E, 2 * I, H // 32)),
            ("w2_blocks", (E, H, I // 32, 16)),
            ("w2_scales", (E, H, I // 32)),
        )
    }
    with Live() as live:
        routing = ogs_routing(c["logits"], k)
        assert live.live == ws.routing_bytes(BF16)  # its temporaries are gone
        before, n = live.mark(), len(live.created)
        if weights == "bf16":
            out = experts_ogs(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"])
        else:
            out = experts_ogs_mxfp4(c["x"], routing, **p, b1=c["b1"], b2=c["b2"])
        assert live.peak - before == ws.peak_bytes(BF16, with_routing=False) == 849_346_560
        assert live.live - before == ws.nbytes(BF16)["output"]  # only the output survives
    assert live.created[n:] == [(ws.intermediate, BF16), (ws.output, BF16), (ws.scratch, BF16)]
    assert out.shape == (T, H) and out.device.type == "meta"


@pytest.mark.parametrize(
    "model, fused_peak, ogs_peak",
    [
        ("gpt-oss-20b", 1_420_707_844, 1_138_446_336),
        ("gpt-oss-120b", 1_420_726_268, 1_141_592_064),
    ],
)
def test_layer_stack_live_peak_at_16k_is_the_docs_table(
    model, fused_peak, ogs_peak, meta_forward_16k
):
    # two layers (the second's input is held by the loop, as at any depth) forward on meta: the
    # whole stack's live bytes at its peak, the MoE's. fused-bf16's is the peak the H200's floor
    # capture measured (docs/engine-memory.md); sglang-mxfp4's is its table's sum
    peaks = {}
    for moe in ("fused-bf16", "sglang-mxfp4"):
        run = meta_forward_16k(model, moe)
        peaks[moe] = run.peak_bytes
        assert run.live_bytes == run.out_bytes
    assert peaks == {"fused-bf16": fused_peak, "sglang-mxfp4": ogs_peak}


@interpreted
def test_interpreted_live_set_is_the_workspace():
    # the kernels run (interpreted) on real CPU tensors: the same counter, the same bytes
    c = case(T=37, E=8, k=4, H=64, I=32)
    ws = ogs_workspace_shapes(37, 4, 64, 32, 8)
    with Live() as live:
        routing = ogs_routing(c["logits"], c["k"])
        assert live.live == ws.routing_bytes(BF16)
        before = live.mark()
        out = experts_ogs(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"], backend="triton")
        assert live.peak - before == ws.peak_bytes(BF16, with_routing=False)
        # the interpreter's frames hold the last launch's arguments in a reference cycle
        gc.collect()
        assert live.live - before == ws.nbytes(BF16)["output"] == out.untyped_storage().nbytes()


# --------------------------------------------------------------------------- kernels, interpreted

# T, E, k, H, I, dtype, bias, experts never chosen
CASES = [
    (1, 1, 1, 5, 3, torch.float32, True, ()),
    (3, 4, 2, 17, 9, torch.float32, False, (1,)),
    (3, 8, 4, 16, 8, BF16, True, (0, 7)),
    (17, 8, 4, 33, 20, BF16, True, (2, 3)),
    (40, 4, 2, 48, 24, BF16, False, ()),
    (64, 8, 2, 48, 24, torch.float32, True, (5,)),
]


@interpreted
@pytest.mark.parametrize("T, E, k, H, I, dtype, bias, empty", CASES)
def test_triton_equals_its_reference_and_the_fused_bf16_path(T, E, k, H, I, dtype, bias, empty):
    c = case(T, E, k, H, I, dtype, bias, seed=T * 7 + E, empty=empty)
    got = run(c, limit=1.5, backend="triton")
    reference = run(c, fn=experts_ogs_reference, limit=1.5)
    assert got.shape == (T, H) and got.dtype == dtype
    assert rel_err(got, reference) <= bound(dtype, H, I, k, 3), rel_err(got, reference)
    want = fused(c, limit=1.5)
    assert rel_err(got, want) <= bound(dtype, H, I, k, 5), rel_err(got, want)
    assert rel_err(reference, want) <= bound(dtype, H, I, k, 5)
    assert torch.equal(got, run(c, limit=1.5, backend="triton"))  # bit-identical run to run


@interpreted
@pytest.mark.parametrize("block_m", BLOCK_MS)
def test_triton_at_every_tile_height(monkeypatch, block_m):
    # many tiles per expert and a ragged last one, even and odd K loops (H 64, I 37)
    monkeypatch.setattr(ogs_workspace_module, "block_m_for", lambda rows, E: block_m)
    c = case(T=150, E=4, k=2, H=64, I=37, dtype=torch.float32, seed=block_m, empty=(2,))
    got = run(c, backend="triton")
    assert rel_err(got, run(c, fn=experts_ogs_reference)) <= bound(torch.float32, 64, 37, 2, 1)


@interpreted
@pytest.mark.parametrize(
    "T, E, k, H, I, dtype", [(17, 4, 2, 64, 32, BF16), (33, 8, 4, 96, 64, torch.float32)]
)
def test_packed_weights_equal_the_bf16_weights_they_dequantise_to(T, E, k, H, I, dtype):
    c = case(T, E, k, H, I, dtype, seed=H)
    p = packed(E, H, I, seed=T)
    c.update(
        w1=dequantize_mxfp4(p["w1_blocks"], p["w1_scales"], dtype=dtype),
        w2=dequantize_mxfp4(p["w2_blocks"], p["w2_scales"], dtype=dtype),
    )
    routing = ogs_routing(c["logits"], k)
    got = experts_ogs_mxfp4(
        c["x"], routing, **p, b1=c["b1"], b2=c["b2"], limit=1.5, backend="triton"
    )
    want = experts_ogs(
        c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"], limit=1.5, backend="triton"
    )
    assert rel_err(got, want) <= bound(dtype, H, I, k, 3), rel_err(got, want)
    # on the CPU without a backend: dequantise, then the reference
    assert torch.equal(
        experts_ogs_mxfp4(c["x"], routing, **p, b1=c["b1"], b2=c["b2"], limit=1.5),
        experts_ogs_reference(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"], limit=1.5),
    )


def test_experts_check_their_arguments():
    c = case()
    routing = ogs_routing(c["logits"], c["k"])
    with pytest.raises(ValueError, match="shapes do not fit"):
        experts_ogs(c["x"], routing, c["w1"], c["w2"][:, :-1])
    with pytest.raises(ValueError, match="b2"):
        experts_ogs(c["x"], routing, c["w1"], c["w2"], c["b1"], c["b2"][:, :-1])
    with pytest.raises(ValueError, match="routing is for"):
        experts_ogs(c["x"][:-1], routing, c["w1"], c["w2"])
    with pytest.raises(ValueError, match="dtype"):
        experts_ogs(c["x"].float(), routing, c["w1"], c["w2"])


def test_cpu_takes_the_reference_and_the_fused_path_is_unchanged():
    c = case(dtype=torch.float32)
    assert torch.equal(run(c), run(c, fn=experts_ogs_reference))
    top, ids = c["logits"].topk(c["k"], dim=-1)
    weights = torch.softmax(top, dim=-1)
    plain = fused_experts(
        c["x"], ids, weights, c["w1"], c["w2"], "clamped_swiglu", c["b1"], c["b2"]
    )
    assert torch.equal(plain, fused(c))


# the compiled path cannot run here, but Triton compiles for sm_90 without a GPU
HOPPER_SCRIPT = r"""
import sys
import torch
try:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except Exception as e:
    print("SKIP", repr(e)); sys.exit(0)
from bcgprof.models.kernels import _triton_moe_ogs as tm

ROWS = ("offs_raw_ptr", "pid_map_ptr")
KERNELS = {
    "gemm1": (tm._gemm1_swiglu_kernel, dict(x_ptr="bf16", y_ptr="bf16", gather_ptr="i32"),
              ["I", "K", "stride_xm", "stride_ym"], ["alpha", "limit"], dict(stride_xk=1, TOP_K=4)),
    "gemm2": (tm._gemm2_kernel, dict(a_ptr="bf16", c_ptr="bf16", gamma_ptr="bf16"),
              ["N", "K", "stride_am", "stride_cm"], [], dict(stride_ak=1)),
}
for mxfp4 in (False, True):
    for bm in (16, 128):
        cfg = tm.tile_config(bm, torch.bfloat16)
        for name, (fn, ptrs, ints, floats, consts) in KERNELS.items():
            names = fn.arg_names
            sig = {}
            for n in names:
                if n.endswith("_ptr"):
                    sig[n] = "*" + ptrs.get(n, "u8" if n in ("w_ptr", "s_ptr") and mxfp4 else
                                          "i32" if n in ROWS else "bf16" if n != "s_ptr" else "u8")
                elif n in floats:
                    sig[n] = "fp32"
                else:
                    sig[n] = "i32"
            c = {**consts, "stride_wk": 1, "stride_bias_n": 1, "MXFP4": mxfp4, "HAS_BIAS": True,
                 "UPCAST": False, "SOFT_BF16": False, "BLOCK_M": bm, "BLOCK_N": cfg.BLOCK_N,
                 "BLOCK_K": cfg.BLOCK_K}
            for n in c:
                sig[n] = "constexpr"
            attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
                     if n not in c and (sig[n].startswith("*") or n.startswith("stride"))}
            try:
                src = ASTSource(fn, sig, c, attrs)
            except TypeError as e:
                print("SKIP", repr(e)); sys.exit(0)
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                               options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
            assert k.metadata.shared <= 160 * 1024, (name, bm, k.metadata.shared)
            if bm == 128:
                assert "warp_group_dot" in k.asm["ttgir"], (name, bm, "no wgmma")
print("OK")
"""


def test_kernels_compile_for_hopper(hopper_compile):
    # both GEMMs, bf16 and MXFP4 weights, a small tile and a wgmma one
    if _interpreter_problem() == "triton is not installed":
        pytest.skip("triton is not installed")
    out, failure = hopper_compile()
    if out.startswith("SKIP"):
        pytest.skip(out.strip())
    assert not failure and out.strip().endswith("OK"), out + failure


# --------------------------------------------------------------------------- the model


def test_only_families_sglang_runs_through_its_mxfp4_moe_build_it():
    assert sorted(f for f in family_names() if model_class(f).sglang_mxfp4_moe) == sorted(
        SGLANG_MXFP4_FAMILIES
    )
    with pytest.raises(ModelConfigError, match="no SGLang MXFP4 MoE"):
        build_meta("Qwen3-30B-A3B", num_layers=1, moe="sglang-mxfp4")
    with pytest.raises(ModelConfigError, match="moe must be one of"):
        build_meta("gpt-oss-20b", num_layers=1, moe="fp4")
    assert build_meta("gpt-oss-20b", num_layers=1, moe="sglang-mxfp4").args.moe == "sglang-mxfp4"


def test_tiny_gpt_oss_forward_is_the_same_with_either_moe(tmp_path):
    cfg = write_config(tmp_path / "cfg", tiny_config("gpt_oss"))
    plain = load(cfg, weights="dummy", device="cpu", seed=3)
    ogs = load(cfg, weights="dummy", device="cpu", seed=3, moe="sglang-mxfp4")
    with torch.no_grad():
        for a, b in zip(plain.parameters(), ogs.parameters(), strict=True):
            assert torch.equal(a, b)
            # dummy biases are zero: make everything matter
            if a.dim() >= 1 and a.is_floating_point():
                a.add_(
                    0.05 * torch.randn(a.shape, generator=torch.Generator().manual_seed(a.numel()))
                )
                b.copy_(a)
        ids, pos = inputs(plain.args.vocab_size, 40)
        model_forward_close(ogs(ids, pos), plain(ids, pos), plain.args)


def test_tensor_parallel_shards_sum_to_the_unsharded_experts():
    # each rank holds whole gate/up pairs of the intermediate (the SwiGLU fused into GEMM1 needs
    # both halves of a pair) and adds the down bias on rank 0 only: the partial outputs sum to the
    # unsharded MoE, before any all-reduce
    config = tiny_config("gpt_oss")
    full = model_class("gpt_oss")(config, moe="sglang-mxfp4").eval()
    with torch.no_grad():
        for name, t in full.named_parameters():
            t.copy_(0.2 * torch.randn(t.shape, generator=torch.Generator().manual_seed(len(name))))
    x = torch.randn(23, full.args.hidden_size, generator=torch.Generator().manual_seed(9))
    mlp = full.layers[0].mlp
    with torch.no_grad():
        want = mlp.experts(x, ogs_routing(mlp.router.logits(x), mlp.top_k))
        parts = []
        for rank in range(2):
            shard = model_class("gpt_oss")(
                config, tp_rank=rank, tp_size=2, moe="sglang-mxfp4"
            ).eval()
            for name in shard.checkpoint_shapes():
                shard.load_checkpoint_tensor(name, full.checkpoint_tensor(name))
            sm = shard.layers[0].mlp
            parts.append(sm.experts(x, ogs_routing(sm.router.logits(x), sm.top_k)))
    assert sm.experts.intermediate_size == full.layers[0].mlp.experts.intermediate_size // 2
    terms = mlp_terms(
        hidden=x.shape[1], intermediate=mlp.experts.intermediate_size, experts=mlp.top_k
    )
    torch.testing.assert_close(
        parts[0] + parts[1],
        want,
        **close(torch.float32, reduction=terms + 1, scale=want.abs().max().item()),
    )


@interpreted
def test_packed_tiny_gpt_oss_on_the_triton_kernels_equals_the_reference(tmp_path):
    cfg = write_config(tmp_path / "cfg", tiny_config("gpt_oss", num_hidden_layers=2))
    plain = load(cfg, weights="dummy", device="cpu", experts="packed", moe="sglang-mxfp4", seed=2)
    kernels = load(cfg, weights="dummy", device="cpu", experts="packed", moe="sglang-mxfp4", seed=2)
    for layer in kernels.layers:
        layer.mlp.experts.backend = "triton"  # the MXFP4 kernels, interpreted
    ids, pos = inputs(plain.args.vocab_size, 12)
    with torch.no_grad():
        model_forward_close(kernels(ids, pos), plain(ids, pos), plain.args)


# --------------------------------------------------------------------------- CLI and run.json


@pytest.fixture
def captured(monkeypatch):
    import bcgprof.measure.runner

    calls = []

    def fake(opts, on_event=None, **_):
        calls.append(opts)
        return bcgprof.measure.runner.CaptureOutcome(
            out=None, status="complete", exit_code=0, reporter=False
        )

    monkeypatch.setattr(bcgprof.measure.runner, "run_capture", fake)
    return calls


def _capture(*args):
    from bcgprof.cli import app

    return CliRunner().invoke(app, ["capture", *args])


def test_capture_refuses_the_sglang_mxfp4_moe_where_sglang_has_none(captured):
    message = "--moe sglang-mxfp4: Qwen3-30B-A3B (qwen3_moe) is not a model SGLang runs"
    assert message in refused(_capture("-m", "Qwen3-30B-A3B", "--moe", "sglang-mxfp4"))
    assert "'fp4' is not one of 'fused-bf16', 'sglang-mxfp4'" in refused(_capture("--moe", "fp4"))
    assert captured == []


def test_capture_passes_the_moe_on(captured):
    assert _capture("--moe", "sglang-mxfp4", "--experts", "packed").exit_code == 0
    assert _capture().exit_code == 0
    assert [o.moe for o in captured] == ["sglang-mxfp4", "fused-bf16"]
    from bcgprof.options import CaptureOptions

    # as a mode's process gets it
    assert CaptureOptions.from_json(captured[0].to_json()).moe == "sglang-mxfp4"


def test_run_json_round_trip_of_the_moe(write_report):
    from bcgprof.render.views import run_line
    from bcgprof.report import read_report
    from bcgprof.report.runinfo import read_run_info

    path = write_report("ogs", moe="sglang-mxfp4")
    report = read_report(path)
    assert report.run.moe == "sglang-mxfp4"
    assert "dummy weights, sglang-mxfp4 MoE)" in run_line(report)
    data = json.loads((path / "run.json").read_text())
    del data["moe"]  # a report written before the field
    (path / "run.json").write_text(json.dumps(data))
    assert read_run_info(path / "run.json").moe == "fused-bf16"
    assert "MoE" not in run_line(read_report(path))
    data["moe"] = "fp4"
    (path / "run.json").write_text(json.dumps(data))
    with pytest.raises(Exception, match="field moe must be one of fused-bf16, sglang-mxfp4"):
        read_run_info(path / "run.json")


def test_compare_names_a_different_moe():
    import dataclasses

    from bcgprof.analysis.compare import run_differences
    from bcgprof.report.schema import RunInfo

    run = RunInfo(model="gpt-oss-20b")
    assert run.moe == "fused-bf16" and run_differences(run, run) == []
    assert run_differences(run, dataclasses.replace(run, moe="sglang-mxfp4")) == [
        "MoE workspaces differ: fused-bf16 vs sglang-mxfp4"
    ]
