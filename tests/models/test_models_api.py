"""``bcgprof.models.load`` / ``build_meta`` and the checkpoint contract of the stacks."""

from __future__ import annotations

import json
import re

import pytest
import torch

from bcgprof.errors import BcgprofError, ModelConfigError, NoGPUError
from bcgprof.models import build_meta, load, model_class
from bcgprof.spec import families, family_names, resolve_model

from .test_models_tiny import inputs, tiny_config, write_config


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


@pytest.fixture
def tiny_dir(tmp_path):
    def make(family="gpt_oss", **overrides):
        return write_config(tmp_path / family, tiny_config(family, **overrides))

    return make


def test_dummy_load_is_seeded_and_on_the_device_in_the_dtype(tiny_dir):
    path = tiny_dir("gpt_oss")
    a = load(path, device="cpu", seed=3)
    b = load(path, device="cpu", seed=3)
    c = load(path, device="cpu", seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.embed_tokens.weight, c.embed_tokens.weight)
    assert {p.dtype for p in a.parameters()} == {torch.float32}  # the tiny config says float32
    assert not a.training and not any(p.requires_grad for p in a.parameters())
    ids, pos = inputs(256, 40)
    out = a(ids, pos)
    assert out.shape == (40, 64) and torch.isfinite(out).all()
    assert torch.equal(out, b(ids, pos))


def test_dtype_default_and_override(tiny_dir):
    # transformers 5 writes "dtype"
    path = tiny_dir("qwen3_moe", torch_dtype=None, dtype="bfloat16")
    model = load(path, device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.rotary["r0"].inv_freq.dtype == torch.float32
    model = load(path, device="cpu", dtype="float32")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    out = load(path, device="cpu", dtype=torch.bfloat16)(*inputs(256, 20))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


@pytest.mark.parametrize("family", family_names())
def test_num_layers_truncates(tiny_dir, family):
    model = load(tiny_dir(family), device="cpu", num_layers=2)
    assert len(model.layers) == 2 and model.num_layers == 2
    names = model.checkpoint_shapes()
    assert "model.layers.1.input_layernorm.weight" in names
    assert not any(n.startswith("model.layers.2.") for n in names)
    assert model.ignores_checkpoint_name("model.layers.2.self_attn.q_proj.weight")
    assert not model.ignores_checkpoint_name("model.layers.1.self_attn.q_proj.weight")
    assert model(*inputs(256, 10)).shape == (10, 64)


@pytest.mark.parametrize("n", [0, 5, -1])
def test_num_layers_out_of_range(tiny_dir, n):
    with pytest.raises(ModelConfigError, match="num_layers must be between 1 and 4"):
        load(tiny_dir("gpt_oss"), device="cpu", num_layers=n)


def test_safetensors_needs_a_checkpoint_directory():
    with pytest.raises(ModelConfigError, match="preset with no checkpoint"):
        load("gpt-oss-20b", weights="safetensors", device="cpu")
    with pytest.raises(
        ModelConfigError, match="one of 'dummy', 'one-layer', 'safetensors', got 'random'"
    ):
        load("gpt-oss-20b", weights="random", device="cpu")


def test_safetensors_from_a_directory_without_weights(tiny_dir):
    with pytest.raises(BcgprofError, match="no \\*.safetensors"):
        load(tiny_dir("llama"), weights="safetensors", device="cpu")


def test_unsupported_architecture_lists_the_supported(tmp_path):
    path = write_config(
        tmp_path / "m",
        {
            "architectures": ["MistralForCausalLM"],
            "model_type": "mistral",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "vocab_size": 100,
        },
    )
    for call in (lambda: load(path, device="cpu"), lambda: build_meta(path)):
        with pytest.raises(ModelConfigError) as err:
            call()
        message = str(err.value)
        assert "MistralForCausalLM" in message
        for family in families().values():
            for arch in family.architectures:
                assert arch in message
    with pytest.raises(ModelConfigError, match=re.escape(", ".join(family_names()))):
        model_class("mistral")


def test_unsupported_activation_and_layer_type(tmp_path):
    with pytest.raises(ModelConfigError, match="hidden_act 'gelu'"):
        build_meta(write_config(tmp_path / "a", tiny_config("llama", hidden_act="gelu")))
    with pytest.raises(ModelConfigError, match="chunked_attention"):
        build_meta(
            write_config(
                tmp_path / "b", tiny_config("gpt_oss", layer_types=["chunked_attention"] * 4)
            )
        )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_cuda_without_cuda_is_one_clear_error(tiny_dir):
    with pytest.raises(NoGPUError, match="CUDA is not available"):
        load(tiny_dir("llama"))


def test_build_meta_allocates_nothing():
    model = build_meta("gpt-oss-120b")
    assert all(p.is_meta for p in model.parameters())
    assert len(model.layers) == 36 and model.args.num_experts == 128
    assert type(model).__name__ == "GptOssModel" and model.config["model_type"] == "gpt_oss"
    assert build_meta(resolve_model("Qwen3-8B"), num_layers=3).num_layers == 3


def test_gpt_oss_20b_checkpoint_shapes():
    shapes = build_meta("gpt-oss-20b").checkpoint_shapes()
    per_layer = {
        "input_layernorm.weight": (2880,),
        "post_attention_layernorm.weight": (2880,),
        "self_attn.q_proj.weight": (4096, 2880),
        "self_attn.q_proj.bias": (4096,),
        "self_attn.k_proj.weight": (512, 2880),
        "self_attn.k_proj.bias": (512,),
        "self_attn.v_proj.weight": (512, 2880),
        "self_attn.v_proj.bias": (512,),
        "self_attn.o_proj.weight": (2880, 4096),
        "self_attn.o_proj.bias": (2880,),
        "self_attn.sinks": (64,),
        "mlp.router.weight": (32, 2880),
        "mlp.router.bias": (32,),
        "mlp.experts.gate_up_proj": (32, 2880, 5760),
        "mlp.experts.gate_up_proj_bias": (32, 5760),
        "mlp.experts.down_proj": (32, 2880, 2880),
        "mlp.experts.down_proj_bias": (32, 2880),
    }
    want = {"model.embed_tokens.weight": (201088, 2880), "model.norm.weight": (2880,)}
    for i in range(24):
        want.update({f"model.layers.{i}.{k}": v for k, v in per_layer.items()})
    assert shapes == want


def test_qwen3_moe_checkpoint_shapes_are_per_expert():
    shapes = build_meta("Qwen3-30B-A3B", num_layers=1).checkpoint_shapes()
    assert shapes["model.layers.0.mlp.gate.weight"] == (128, 2048)
    assert shapes["model.layers.0.mlp.experts.127.gate_proj.weight"] == (768, 2048)
    assert shapes["model.layers.0.mlp.experts.0.up_proj.weight"] == (768, 2048)
    assert shapes["model.layers.0.mlp.experts.5.down_proj.weight"] == (2048, 768)
    assert shapes["model.layers.0.self_attn.q_norm.weight"] == (128,)
    assert len(shapes) == 2 + 2 + 4 + 2 + 1 + 128 * 3


def test_llama_and_qwen3_checkpoint_shapes():
    llama = build_meta("Llama-3.1-8B", num_layers=1).checkpoint_shapes()
    assert llama["model.layers.0.mlp.gate_proj.weight"] == (14336, 4096)
    assert llama["model.layers.0.mlp.down_proj.weight"] == (4096, 14336)
    assert llama["model.layers.0.self_attn.k_proj.weight"] == (1024, 4096)
    assert not any(n.endswith(".bias") for n in llama)
    qwen = build_meta("Qwen3-8B", num_layers=1).checkpoint_shapes()
    assert qwen["model.layers.0.self_attn.k_norm.weight"] == (128,)


def test_load_checkpoint_tensor_places_slices_and_checks(tiny_dir):
    model = load(tiny_dir("qwen3_moe"), device="cpu")
    gate = torch.randn(32, 64)
    model.load_checkpoint_tensor(
        "model.layers.0.mlp.experts.3.gate_proj.weight", gate.to(torch.bfloat16)
    )
    experts = model.layers[0].mlp.experts
    assert torch.equal(experts.gate_up_proj[3, :32], gate.to(torch.bfloat16).float())
    k = torch.randn(32, 64)
    model.load_checkpoint_tensor("model.layers.1.self_attn.k_proj.weight", k)
    qkv = model.layers[1].self_attn.qkv_proj.weight
    assert torch.equal(qkv[64:96], k)  # q rows (4 heads x 16) first, then k, then v
    with pytest.raises(
        ModelConfigError, match="unexpected checkpoint tensor model.layers.0.mlp.experts.16"
    ):
        model.load_checkpoint_tensor("model.layers.0.mlp.experts.16.gate_proj.weight", gate)
    with pytest.raises(ModelConfigError, match=r"has shape \(64, 32\), expected \(32, 64\)"):
        model.load_checkpoint_tensor("model.layers.0.mlp.experts.3.gate_proj.weight", gate.T)


def test_ignored_names(tiny_dir):
    model = load(tiny_dir("llama"), device="cpu")
    assert model.ignores_checkpoint_name("lm_head.weight")
    assert model.ignores_checkpoint_name("model.layers.0.self_attn.rotary_emb.inv_freq")
    assert not model.ignores_checkpoint_name("model.embed_tokens.weight")
    assert not model.ignores_checkpoint_name("model.layers.0.mlp.up_proj.weight")


def test_every_parameter_is_filled_by_the_checkpoint():
    # each parameter element is covered by exactly one checkpoint tensor
    for name in ("gpt-oss-20b", "Llama-3.1-8B", "Qwen3-8B", "Qwen3-30B-A3B"):
        model = build_meta(name, num_layers=2)
        covered = {}
        for target in model.checkpoint_targets().values():
            param = model.get_parameter(target.param)
            covered[target.param] = covered.get(target.param, 0) + param[target.index].numel()
            assert tuple(param[target.index].shape) == tuple(target.shape), target.name
        assert covered == {n: p.numel() for n, p in model.named_parameters()}, name


def test_config_json_round_trip_of_the_family_keys(tmp_path):
    # transformers 5 writes num_local_experts for qwen3_moe; the published config says num_experts
    config = tiny_config("qwen3_moe")
    config["num_local_experts"] = config.pop("num_experts")
    model = build_meta(write_config(tmp_path / "q", config))
    assert model.args.num_experts == 16
    assert json.loads((tmp_path / "q" / "config.json").read_text())["num_local_experts"] == 16
