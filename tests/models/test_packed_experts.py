"""gpt-oss's MXFP4 experts kept packed (``--experts packed``), on the CPU.

* The packed fused MoE (:func:`fused_experts_mxfp4`) under Triton's interpreter against the bf16
  fused MoE run on the weights :mod:`bcgprof.models.mxfp4` dequantises (exact in bf16 and float32),
  and its allocations against the bf16 path's (the same, on the meta device).
* A tiny checkpoint written as the published ones are (``*_blocks`` / ``*_scales`` under the real
  key names): loaded packed, its bytes land untouched; the packed stack's forward (its experts on
  the Triton interpreter) equals the bf16 stack loaded from the same files (dequantised, PyTorch
  reference), within a reordering of sums. TP shards slice the bytes as the bf16 layout slices.
* Dummy packed weights, ``--weights one-layer``, parameter bytes; the option's CLI refusal;
run.json.

Tolerances (tests/tolerances.py). The dequantised weights are exact in bf16 and float32 (two
significant bits times a power of two), so both paths multiply the same numbers; they differ in
the order of their float32 sums only: the packed kernel adds the even and the odd k of each step in
two dots. In float32 that is ``2 * gamma(n)`` relative to the terms' magnitude, n the rounded terms
along the MoE (``mlp_terms``). In bf16 the float32 sums are rounded to bf16 at four points (GEMM1's
output, the activation, GEMM2's output, the sum over k); a float32 difference can flip any of those
roundings, one bf16 unit (2^-8 relative) each: ``close(bf16, reduction=4)`` (about 3.2%) bounds
that, plus the float32 part. Both are compared as norms (relative error over all elements), as the
bf16 kernel tests compare theirs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

# tests/conftest.py does this first; here for running the file alone
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from safetensors.torch import save_file
from torch.utils._python_dispatch import TorchDispatchMode
from typer.testing import CliRunner

from bcgprof.errors import ModelConfigError
from bcgprof.models import build_meta, load, model_class
from bcgprof.models.kernels import fused_experts, fused_experts_mxfp4, fused_experts_reference
from bcgprof.models.kernels import workspace as workspace_module
from bcgprof.models.mxfp4 import DUMMY_SCALES, dequantize_mxfp4
from bcgprof.models.weights import parameter_bytes
from bcgprof.options import PACKED_EXPERT_FAMILIES
from bcgprof.spec import family_names

from .test_models_tiny import close as model_forward_close
from .test_models_tiny import inputs, tiny_config, write_config
from helpers import refused
from tolerances import close, mlp_terms

BF16 = torch.bfloat16


def _interpreter_problem() -> str | None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        return "needs TRITON_INTERPRET=1 (set by this module when there is no CUDA device)"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "triton is not installed"
    from bcgprof.models.kernels import _triton_moe

    if type(_triton_moe._moe_gemm_mxfp4_kernel).__name__ != "InterpretedFunction":
        return "triton was imported before TRITON_INTERPRET was set (tests/conftest.py sets it)"
    return None


_PROBLEM = _interpreter_problem()
interpreted = pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")


def packed_case(T=17, E=4, k=2, H=64, I=32, dtype=BF16, bias=True, seed=0):
    """Random activations and routing, packed experts (scales in the dummy range) and biases."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).to(dtype)
    top, ids = torch.randn(T, E, generator=g).topk(k, dim=-1)
    lo, hi = DUMMY_SCALES
    return dict(
        x=x,
        topk_ids=ids,
        topk_weights=torch.softmax(top, dim=-1),
        w1_blocks=torch.randint(0, 256, (E, 2 * I, H // 32, 16), dtype=torch.uint8, generator=g),
        w1_scales=torch.randint(lo, hi + 1, (E, 2 * I, H // 32), dtype=torch.uint8, generator=g),
        w2_blocks=torch.randint(0, 256, (E, H, I // 32, 16), dtype=torch.uint8, generator=g),
        w2_scales=torch.randint(lo, hi + 1, (E, H, I // 32), dtype=torch.uint8, generator=g),
        b1=torch.randn(E, 2 * I, generator=g).to(dtype) if bias else None,
        b2=torch.randn(E, H, generator=g).to(dtype) if bias else None,
    )


def dequantised(case: dict) -> dict:
    """The same problem with bf16-layout weights (w1 [E, H, 2I], w2 [E, I, H]) in x's dtype."""
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


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def bound(dtype: torch.dtype, H: int, I: int, k: int) -> float:
    """The relative difference allowed between the packed and the bf16 fused MoE (module
    docstring)."""
    f32 = close(torch.float32, reduction=mlp_terms(hidden=H, intermediate=I, experts=k))["rtol"]
    return f32 if dtype == torch.float32 else f32 + close(BF16, reduction=4)["rtol"]


# --------------------------------------------------------------------------- the kernel

# T, E, k, H, I, dtype: one K step and several, K a multiple of BLOCK_K and not (H = 96, 160)
KERNEL_CASES = [
    (1, 1, 1, 32, 32, torch.float32),
    (17, 4, 2, 64, 32, BF16),
    (33, 8, 4, 96, 64, torch.float32),
    (40, 8, 4, 160, 96, BF16),
]


@interpreted
@pytest.mark.parametrize("T, E, k, H, I, dtype", KERNEL_CASES)
def test_packed_kernel_equals_the_bf16_path_on_dequantised_weights(T, E, k, H, I, dtype):
    case = packed_case(T, E, k, H, I, dtype, seed=T + H)
    got = fused_experts_mxfp4(**case, limit=1.5, backend="triton")
    plain = dequantised(case)
    want = fused_experts(**plain, activation="clamped_swiglu", limit=1.5, backend="triton")
    reference = fused_experts_reference(**plain, activation="clamped_swiglu", limit=1.5)
    assert got.shape == (T, H) and got.dtype == dtype
    assert rel_err(got, want) <= bound(dtype, H, I, k), rel_err(got, want)
    assert rel_err(got, reference) <= bound(dtype, H, I, k), rel_err(got, reference)
    assert torch.equal(got, fused_experts_mxfp4(**case, limit=1.5, backend="triton"))  # run to run


@interpreted
@pytest.mark.parametrize("block_m", [16, 128])
def test_packed_kernel_at_small_and_large_tiles_silu_and_in_place(monkeypatch, block_m):
    monkeypatch.setattr(workspace_module, "block_m_for", lambda rows, E: block_m)
    case = packed_case(T=70, E=4, k=2, H=64, I=64, dtype=BF16, bias=False, seed=block_m)
    want = fused_experts(**dequantised(case), activation="silu", backend="triton")
    x = case["x"].clone()
    got = fused_experts_mxfp4(**{**case, "x": x}, activation="silu", out=x, backend="triton")
    assert got is x
    assert rel_err(got, want) <= bound(BF16, 64, 64, 2)


@interpreted
def test_packed_kernel_reads_a_tensor_parallel_slice_in_place():
    # rank 1 of 2: gate_up's rows [2I/2, 2I) (whole gate/up pairs), down's groups [I/64, I/32)
    full = packed_case(T=21, E=4, k=2, H=64, I=64, dtype=torch.float32, seed=3)
    rows, groups = slice(64, 128), slice(1, 2)
    case = dict(
        full,
        w1_blocks=full["w1_blocks"][:, rows],
        w1_scales=full["w1_scales"][:, rows],
        w2_blocks=full["w2_blocks"][:, :, groups],
        w2_scales=full["w2_scales"][:, :, groups],
        b1=full["b1"][:, rows],
    )
    assert not case["w2_blocks"].is_contiguous()
    got = fused_experts_mxfp4(**case, backend="triton")
    want = fused_experts_reference(
        **dequantised({k: (v.contiguous() if v is not None else v) for k, v in case.items()}),
        activation="clamped_swiglu",
    )
    assert rel_err(got, want) <= bound(torch.float32, 64, 32, 2)


class Allocations(TorchDispatchMode):
    """Every tensor an op sequence creates: (op, shape, dtype)."""

    def __init__(self):
        super().__init__()
        self.created: list[tuple[str, tuple, torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.created.append((str(func), tuple(t.shape), t.dtype))
        return out


@pytest.mark.parametrize("T", [1, 300, 5000])
@pytest.mark.parametrize("in_place", [False, True])
def test_packed_path_allocates_exactly_what_the_bf16_path_allocates(T, in_place):
    # on the meta device both run their Triton path's allocations and launch nothing
    case = {
        k: (v.to("meta") if v is not None else v)
        for k, v in packed_case(T, 32, 4, 2880 // 10, 96).items()
    }
    plain = {
        k: (v.to("meta") if v is not None else v)
        for k, v in dequantised(
            {
                k: (v.to("cpu") if v is not None else v)
                for k, v in packed_case(2, 32, 4, 2880 // 10, 96).items()
            }
        ).items()
    }
    plain = dict(plain, x=case["x"], topk_ids=case["topk_ids"], topk_weights=case["topk_weights"])
    seen = {}
    for name, fn, kwargs in (("packed", fused_experts_mxfp4, case), ("bf16", fused_experts, plain)):
        with Allocations() as watch:
            fn(**kwargs, activation="clamped_swiglu", out=kwargs["x"] if in_place else None)
        seen[name] = watch.created
    assert seen["packed"] == seen["bf16"] and seen["packed"]


def test_packed_path_checks_its_arguments():
    case = packed_case()
    with pytest.raises(ValueError, match="uint8"):
        fused_experts_mxfp4(**dict(case, w1_scales=case["w1_scales"].to(torch.int32)))
    with pytest.raises(ValueError, match="bfloat16 or float32"):
        fused_experts_mxfp4(**dict(case, x=case["x"].half()))
    with pytest.raises(ValueError, match="do not fit"):
        fused_experts_mxfp4(
            **dict(case, w2_blocks=case["w2_blocks"][:2], w2_scales=case["w2_scales"][:2])
        )


def test_cpu_reference_path_equals_the_bf16_reference_bit_for_bit():
    case = packed_case(dtype=BF16)
    got = fused_experts_mxfp4(**case)  # CPU, no backend: dequantise, then the reference
    assert torch.equal(
        got, fused_experts_reference(**dequantised(case), activation="clamped_swiglu")
    )


# --------------------------------------------------------------------------- the model


def _tiny(tmp_path: Path, name: str = "cfg", **overrides) -> Path:
    return write_config(tmp_path / name, tiny_config("gpt_oss", **overrides))


def write_packed_checkpoint(tmp_path: Path, **overrides) -> Path:
    """A checkpoint directory in gpt-oss's published layout: every tensor a stack of this config
    reads, the experts as ``*_blocks`` / ``*_scales`` under the real key names."""
    ckpt = _tiny(tmp_path, "ckpt", **overrides)
    source = load(ckpt, weights="dummy", device="cpu", experts="packed", seed=7)
    gen = torch.Generator().manual_seed(1)
    tensors = {}
    for name in source.checkpoint_shapes():
        t = source.checkpoint_tensor(name).clone()
        # dummy biases are zero: make them matter
        if t.is_floating_point() and name.endswith("bias"):
            t = 0.1 * torch.randn(t.shape, generator=gen)
        tensors[name] = t.contiguous()
    assert "model.layers.0.mlp.experts.gate_up_proj_blocks" in tensors
    assert "model.layers.1.mlp.experts.down_proj_scales" in tensors
    save_file(tensors, str(ckpt / "model.safetensors"))
    return ckpt


@interpreted
def test_packed_checkpoint_loads_as_stored_and_matches_the_bf16_stack(tmp_path):
    ckpt = write_packed_checkpoint(tmp_path)
    from safetensors.torch import load_file

    stored = load_file(str(ckpt / "model.safetensors"))
    packed = load(ckpt, weights="safetensors", device="cpu", dtype=torch.float32, experts="packed")
    # dequantised by mxfp4
    plain = load(ckpt, weights="safetensors", device="cpu", dtype=torch.float32)
    for i, layer in enumerate(packed.layers):
        ex = layer.mlp.experts
        for proj in ("gate_up_proj", "down_proj"):
            for part in ("blocks", "scales"):
                param = getattr(ex, f"{proj}_{part}")
                assert param.dtype == torch.uint8
                assert torch.equal(param, stored[f"model.layers.{i}.mlp.experts.{proj}_{part}"])
        ex.backend = "triton"  # the packed kernel, interpreted
    assert not any(
        p.is_floating_point() and p.dim() == 3
        for n, p in packed.named_parameters()
        if "experts" in n
    )
    ids, pos = inputs(packed.args.vocab_size, 40)
    with torch.no_grad():
        model_forward_close(packed(ids, pos), plain(ids, pos), plain.args)


def test_packed_tensor_parallel_shards_slice_the_stored_bytes(tmp_path):
    # 64 a rank: whole 32-value groups
    ckpt = write_packed_checkpoint(tmp_path, intermediate_size=128)
    full = load(ckpt, weights="safetensors", device="cpu", experts="packed", num_layers=1)
    ex = full.layers[0].mlp.experts
    for rank in (0, 1):
        shard = (
            load(
                ckpt,
                weights="safetensors",
                device="cpu",
                experts="packed",
                num_layers=1,
                tp_rank=rank,
                tp_size=2,
            )
            .layers[0]
            .mlp.experts
        )
        rows, groups = slice(128 * rank, 128 * (rank + 1)), slice(2 * rank, 2 * (rank + 1))
        assert torch.equal(shard.gate_up_proj_blocks, ex.gate_up_proj_blocks[:, rows])
        assert torch.equal(shard.gate_up_proj_scales, ex.gate_up_proj_scales[:, rows])
        assert torch.equal(shard.gate_up_proj_bias, ex.gate_up_proj_bias[:, rows])
        assert torch.equal(shard.down_proj_blocks, ex.down_proj_blocks[:, :, groups])
        assert torch.equal(shard.down_proj_scales, ex.down_proj_scales[:, :, groups])
    with pytest.raises(ModelConfigError, match="multiples of 32"):
        # 16 a rank: half a group
        build_meta(str(ckpt / "config.json"), tp_rank=0, tp_size=8, experts="packed")


def test_dummy_packed_weights_and_shared_layers(tmp_path):
    cfg = _tiny(tmp_path)
    model = load(cfg, weights="dummy", device="cpu", experts="packed")
    ex = model.layers[0].mlp.experts
    assert (
        ex.gate_up_proj_scales.min() >= DUMMY_SCALES[0]
        and ex.gate_up_proj_scales.max() <= DUMMY_SCALES[1]
    )
    assert ex.down_proj_blocks.unique().numel() > 200  # random bytes
    again = load(cfg, weights="dummy", device="cpu", experts="packed")
    assert torch.equal(
        again.layers[1].mlp.experts.down_proj_blocks, model.layers[1].mlp.experts.down_proj_blocks
    )
    assert not torch.equal(
        model.layers[0].mlp.experts.down_proj_blocks, model.layers[1].mlp.experts.down_proj_blocks
    )
    shared = load(cfg, weights="one-layer", device="cpu", experts="packed")
    a, b = shared.layers[0].mlp.experts, shared.layers[3].mlp.experts
    assert (
        a.gate_up_proj_blocks is b.gate_up_proj_blocks and a.down_proj_scales is b.down_proj_scales
    )
    ids, pos = inputs(shared.args.vocab_size, 12)
    with torch.no_grad():
        assert torch.isfinite(model(ids, pos)).all() and torch.isfinite(shared(ids, pos)).all()


def test_packed_parameter_bytes_of_gpt_oss_20b():
    bf16 = build_meta("gpt-oss-20b", num_layers=1).to(BF16)
    packed = build_meta("gpt-oss-20b", num_layers=1, experts="packed").to(BF16)
    E, H, I = 32, 2880, 2880
    expert_values = E * 3 * I * H  # gate_up [H, 2I] and down [I, H] per expert
    assert (
        parameter_bytes(bf16) - parameter_bytes(packed)
        == expert_values * 2 - expert_values * 17 // 32
    )
    names = {
        n: (tuple(p.shape), p.dtype) for n, p in packed.layers[0].mlp.experts.named_parameters()
    }
    assert names["gate_up_proj_blocks"] == ((E, 2 * I, H // 32, 16), torch.uint8)
    assert names["down_proj_scales"] == ((E, H, I // 32), torch.uint8)
    assert names["down_proj_bias"] == ((E, H), BF16)


def test_only_families_with_mxfp4_experts_keep_them_packed():
    assert sorted(f for f in family_names() if model_class(f).packed_experts) == sorted(
        PACKED_EXPERT_FAMILIES
    )
    with pytest.raises(ModelConfigError, match="no MXFP4 experts"):
        build_meta("Qwen3-30B-A3B", num_layers=1, experts="packed")


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


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("-m", "Llama-3.1-8B", "--experts", "packed"),
            "--experts packed: Llama-3.1-8B (llama) has no MXFP4 experts",
        ),
        (("-m", "Qwen3-30B-A3B", "--experts", "packed"), "has no MXFP4 experts to keep packed"),
        (("--experts", "packed", "--tp", "4"), "must be multiples of the 32-value MXFP4 group"),
        (("--experts", "fp8"), "'fp8' is not one of 'bf16', 'packed'"),
    ],
)
def test_capture_refuses_packed_experts_it_cannot_keep(captured, args, message):
    assert message in refused(_capture(*args))
    assert captured == []


def test_capture_passes_the_choice_on(captured):
    assert _capture("--experts", "packed", "--tp", "2").exit_code == 0
    assert _capture().exit_code == 0
    assert [o.experts for o in captured] == ["packed", "bf16"]
    from bcgprof.options import CaptureOptions

    # as a mode's process gets it
    assert CaptureOptions.from_json(captured[0].to_json()).experts == "packed"


def test_run_json_round_trip_of_the_experts(write_report, tmp_path):
    from bcgprof.render.views import run_line
    from bcgprof.report import read_report
    from bcgprof.report.runinfo import read_run_info

    path = write_report("packed", experts="packed")
    report = read_report(path)
    assert report.run.experts == "packed"
    assert "dummy weights, packed experts)" in run_line(report)
    data = json.loads((path / "run.json").read_text())
    del data["experts"]  # a report written before the field
    (path / "run.json").write_text(json.dumps(data))
    assert read_run_info(path / "run.json").experts == "bf16"
    assert "packed" not in run_line(read_report(path))
    data["experts"] = "fp4"
    (path / "run.json").write_text(json.dumps(data))
    with pytest.raises(Exception, match="field experts must be one of bf16, packed"):
        read_run_info(path / "run.json")


# --------------------------------------------------------------------------- compiled for Hopper

HOPPER_SCRIPT = r"""
import sys
import torch
try:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except Exception as e:
    print("SKIP", repr(e)); sys.exit(0)
from bcgprof.models.kernels import _triton_moe as tm

ints = ["N", "K", "num_rows", "num_tiles_m", "stride_am", "stride_ak", "stride_be", "stride_bn",
        "stride_se", "stride_sn", "stride_sg", "stride_bias_e", "stride_bias_n", "stride_cm",
        "stride_cn"]
ones = {"stride_ak", "stride_cn", "stride_bias_n"}
for bm, even in ((16, False), (64, True)):
    cfg = tm.gemm_config(bm, torch.bfloat16)
    sig = {"a_ptr": "*bf16", "b_ptr": "*u8", "s_ptr": "*u8", "bias_ptr": "*bf16", "c_ptr": "*bf16",
           "weight_ptr": "*fp32", "sorted_ids_ptr": "*i32", "expert_ids_ptr": "*i32",
           "num_post_ptr": "*i32", **{n: "i32" for n in ints}}
    consts = {**{n: 1 for n in ones}, **dict(A_ROW_DIV=4, HAS_BIAS=True, MUL_WEIGHT=False,
              EVEN_K=even, UPCAST=False, SOFT_BF16=False, BLOCK_M=bm, BLOCK_N=cfg.BLOCK_N,
              BLOCK_K=cfg.BLOCK_K, GROUP_M=cfg.GROUP_M)}
    names = list(sig)
    for n in consts:
        sig[n] = "constexpr"
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if n not in consts and (sig[n].startswith("*") or n.startswith("stride"))}
    try:
        src = ASTSource(tm._moe_gemm_mxfp4_kernel, sig, consts, attrs)
    except TypeError as e:
        print("SKIP", repr(e)); sys.exit(0)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    assert k.metadata.shared <= 160 * 1024, (bm, k.metadata.shared)
    if bm >= 64:
        assert "warp_group_dot" in k.asm["ttgir"], (bm, "no wgmma")
print("OK")
"""


def test_packed_kernel_compiles_for_hopper(hopper_compile):
    # the compiled path cannot run here, but Triton compiles for sm_90 without a GPU: a small tile
    # with a ragged K loop and a wgmma tile with the pipelined one
    if _interpreter_problem() == "triton is not installed":
        pytest.skip("triton is not installed")
    out, failure = hopper_compile()
    if out.startswith("SKIP"):
        pytest.skip(out.strip())
    assert not failure and out.strip().endswith("OK"), out + failure
