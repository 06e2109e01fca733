"""Tiny configs of every family and their transformers reference models (helpers for
the tests/models/test_models_*.py files; no tests of its own).

The tiny configs keep what makes each family itself (gpt-oss: sinks, a small sliding
window, YaRN, biases, a clamp limit low enough to bite; Llama: llama3 RoPE scaling with
a short original context so that scaling matters at these positions; Qwen3: Q/K norms;
Qwen3-MoE: many experts, norm_topk_prob) and shrink the rest. A family the registry
knows and TINY does not gets its first preset with the sizes cut down (:func:`shrunk_preset`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from bcgprof.spec import get_family, presets_dir, read_config

from tolerances import model_close

TINY = {
    "gpt_oss": {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "experts_per_token": 2,
        "sliding_window": 8,
        "swiglu_limit": 1.0,
        "attention_bias": True,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 131072,
        "rope_theta": 150000,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "torch_dtype": "float32",
    },
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "attention_bias": True,
        "mlp_bias": True,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 8.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 64,
            "rope_type": "llama3",
        },
        "torch_dtype": "float32",
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000,
        "rope_scaling": None,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": 3,
        "torch_dtype": "float32",
    },
    "qwen3_moe": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_experts": 16,
        "num_experts_per_tok": 4,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "use_sliding_window": False,
        "sliding_window": None,
        "torch_dtype": "float32",
    },
}

# a preset's sizes cut down: every field that sizes the model, where the preset has it
SHRUNK = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "moe_intermediate_size": 32,
    "num_experts": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "experts_per_token": 2,
}


def shrunk_preset(family: str) -> dict:
    """The family's first preset with its sizes cut down to :data:`SHRUNK`, in float32."""
    config = read_config(presets_dir() / f"{get_family(family).presets[0]}.json")
    config.update(
        {k: v for k, v in SHRUNK.items() if k in config or k in ("head_dim", "num_key_value_heads")}
    )
    if config.get("layer_types"):
        config["layer_types"] = config["layer_types"][: SHRUNK["num_hidden_layers"]]
    if isinstance(config.get("sliding_window"), int):
        config["sliding_window"] = 8
    config.pop("dtype", None)
    config["torch_dtype"] = "float32"
    return config


def tiny_config(family: str, **overrides) -> dict:
    config = copy.deepcopy(TINY[family]) if family in TINY else shrunk_preset(family)
    config.update(overrides)
    return config


def randomize_(module: torch.nn.Module, seed: int = 0, std: float = 0.2) -> None:
    """Weights big enough that every part of a tiny model moves the output: matrices
    and biases N(0, std), norms 1 + N(0, std), gpt-oss sinks N(0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + std * noise)
            elif name.endswith("sinks"):
                p.copy_(noise)
            else:
                p.copy_(std * noise)


def hf_model(config: dict, seed: int = 0):
    """The transformers ...ForCausalLM of ``config``, eager attention, float32, random weights."""
    import transformers

    model_cls = getattr(transformers, config["architectures"][0])
    kwargs = {
        k: v for k, v in config.items() if k not in ("architectures", "model_type", "torch_dtype")
    }
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **kwargs)
    hf_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(hf_config).eval()
    randomize_(model, seed)
    return model


def hf_hidden(model, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Final-norm hidden states [T, hidden] of the base model (no LM head)."""
    with torch.no_grad():
        out = model.model(input_ids=ids[None], position_ids=positions[None], use_cache=False)
    return out.last_hidden_state[0]


def save_checkpoint(model, path: Path) -> Path:
    """save_pretrained in safetensors: transformers 5 writes the published layout
    (``model.`` prefix, per-expert Qwen3-MoE names, gpt-oss bf16 expert names)."""
    model.save_pretrained(path, safe_serialization=True)
    return path


def write_config(path: Path, config: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    return path


def inputs(vocab: int, T: int, offset: int = 0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (T,), generator=gen)
    return ids, torch.arange(offset, offset + T)


def close(out: torch.Tensor, ref: torch.Tensor, args) -> None:
    """Two float32 forwards [T, hidden] of the model built with ``args`` (``model.args``) agree
    within a reordering of their sums (tests/tolerances.py), each query over at most T keys."""
    tol = model_close(args, keys=ref.shape[0], scale=ref.abs().max().item(), dtype=ref.dtype)
    torch.testing.assert_close(out, ref, **tol)
