"""Our layer stacks against transformers' implementation of the same family.

Each tiny transformers model is saved with ``save_pretrained`` (transformers 5 writes
the published checkpoint layout) and loaded back through ``bcgprof.models.load(...,
weights="safetensors")``, so these tests cover the checkpoint contract and the loader
too. Hidden states must agree within float32 tolerance. Attention blocks are forced
small so that query/key block boundaries, sliding windows and sinks meet inside them.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from bcgprof.models import load
from bcgprof.models.layers import attention as attention_layer
from bcgprof.spec import family_names

from .test_models_tiny import (
    close,
    hf_hidden,
    hf_model,
    inputs,
    save_checkpoint,
    tiny_config,
    write_config,
)

transformers = pytest.importorskip("transformers")

FAMILIES = family_names()


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)


@pytest.fixture
def small_blocks(monkeypatch):
    """Query blocks of 16 rows, key blocks of 24 columns: boundaries everywhere."""

    def set_blocks(num_heads: int, block_q: int = 16, block_k: int = 24) -> None:
        monkeypatch.setattr(attention_layer, "ATTN_BLOCK_Q", block_q)
        monkeypatch.setattr(attention_layer, "ATTN_TILE_ELEMS", num_heads * block_q * block_k)

    return set_blocks


def _check(tmp_path, config, T=200, offset=0, num_layers=None, published_config=True, seed=0):
    hf = hf_model(config, seed=seed)
    ckpt = save_checkpoint(hf, tmp_path / "ckpt")
    if published_config:  # our published-dialect config.json instead of the transformers-5 one
        write_config(ckpt, config)
    ours = load(
        ckpt, weights="safetensors", device="cpu", dtype=torch.float32, num_layers=num_layers
    )
    if num_layers is not None:
        hf.model.layers = hf.model.layers[:num_layers]
    ids, pos = inputs(config["vocab_size"], T, offset, seed)
    with torch.no_grad():
        out = ours(ids, pos)
    ref = hf_hidden(hf, ids, pos)
    assert out.shape == (T, config["hidden_size"]) and out.dtype == torch.float32
    close(out, ref, ours.args)
    return ours, out


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "published_config", [True, False], ids=["published-config", "transformers5-config"]
)
def test_matches_transformers(tmp_path, small_blocks, family, published_config):
    config = tiny_config(family)
    small_blocks(config["num_attention_heads"])
    _check(tmp_path, config, T=200, published_config=published_config)


@pytest.mark.parametrize("family", FAMILIES)
def test_matches_transformers_default_blocks_far_positions(tmp_path, family):
    # one block covers everything here; positions far past gpt-oss's and llama's original context
    config = tiny_config(family)
    _check(tmp_path, config, T=77, offset=9000, seed=1)


def test_gpt_oss_variants(tmp_path, small_blocks):
    # layer_types absent (default alternation), a window wider than a key block, top-1 routing
    config = tiny_config("gpt_oss", sliding_window=40, num_experts_per_tok=1, experts_per_token=1)
    del config["layer_types"]
    small_blocks(config["num_attention_heads"], block_q=32, block_k=16)
    ours, _ = _check(tmp_path, config, T=150)
    assert [layer.self_attn.window for layer in ours.layers] == [40, None, 40, None]


def test_qwen3_sliding_layers(tmp_path, small_blocks):
    # use_sliding_window: layers >= max_window_layers slide (transformers' rule)
    config = tiny_config("qwen3", use_sliding_window=True, sliding_window=8, max_window_layers=1)
    small_blocks(config["num_attention_heads"])
    ours, _ = _check(tmp_path, config, T=100)
    assert [layer.self_attn.window for layer in ours.layers] == [None, 8, 8]


def test_qwen3_moe_dense_layers_and_no_renorm(tmp_path):
    config = tiny_config(
        "qwen3_moe",
        mlp_only_layers=[1],
        norm_topk_prob=False,
        num_experts=32,
        num_experts_per_tok=8,
    )
    ours, _ = _check(tmp_path, config, T=64)
    assert [type(layer.mlp).__name__ for layer in ours.layers] == [
        "Qwen3MoeSparseBlock",
        "DenseMLP",
        "Qwen3MoeSparseBlock",
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_truncated_stack_matches_truncated_transformers(tmp_path, family):
    config = tiny_config(family)
    ours, _ = _check(tmp_path, config, T=40, num_layers=2)
    assert len(ours.layers) == 2
    assert all(
        int(n.split(".")[2]) < 2 for n in ours.checkpoint_shapes() if n.startswith("model.layers.")
    )


def test_gpt_oss_mxfp4_checkpoint(tmp_path):
    """A checkpoint in gpt-oss's published MXFP4 layout (``*_blocks`` + ``*_scales``
    experts): loaded through our loader, the stack matches transformers running on the
    weights that transformers' own conversion dequantises from the same bytes."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    config = tiny_config("gpt_oss")
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    hf = hf_model({k: v for k, v in config.items() if k != "quantization_config"})
    E, H, I = config["num_local_experts"], config["hidden_size"], config["intermediate_size"]
    gen = torch.Generator().manual_seed(5)
    tensors = {}
    for name, param in hf.state_dict().items():
        tensors[name] = param.contiguous()
    for i in range(config["num_hidden_layers"]):
        pre = f"model.layers.{i}.mlp.experts"
        for proj, rows, cols in (("gate_up_proj", 2 * I, H), ("down_proj", H, I)):
            blocks = torch.randint(
                0, 256, (E, rows, cols // 32, 16), dtype=torch.uint8, generator=gen
            )
            scales = torch.randint(
                121, 126, (E, rows, cols // 32), dtype=torch.uint8, generator=gen
            )
            deq = convert_moe_packed_tensors(blocks.clone(), scales.clone(), dtype=torch.float32)
            assert deq.shape == hf.get_parameter(f"{pre}.{proj}").shape
            with torch.no_grad():
                hf.get_parameter(f"{pre}.{proj}").copy_(deq)
            del tensors[f"{pre}.{proj}"]
            tensors[f"{pre}.{proj}_blocks"] = blocks
            tensors[f"{pre}.{proj}_scales"] = scales
    ckpt = write_config(tmp_path / "ckpt", config)
    save_file(tensors, str(ckpt / "model.safetensors"))
    ours = load(ckpt, weights="safetensors", device="cpu", dtype=torch.float32)
    ids, pos = inputs(config["vocab_size"], 50)
    with torch.no_grad():
        close(ours(ids, pos), hf_hidden(hf, ids, pos), ours.args)


def test_qwen3_moe_checkpoint_is_per_expert(tmp_path):
    # what our loader targets is the published layout: one tensor per expert and projection
    config = tiny_config("qwen3_moe")
    ckpt = save_checkpoint(hf_model(config), tmp_path / "ckpt")
    names = set(load_file(str(ckpt / "model.safetensors")))
    assert "model.layers.0.mlp.experts.15.down_proj.weight" in names
    assert "model.layers.0.mlp.gate.weight" in names
    assert (
        json.loads((ckpt / "config.json").read_text())["rope_parameters"]["rope_type"] == "default"
    )
