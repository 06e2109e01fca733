"""Tensor-parallel layer stacks on the CPU: gloo, world size 2.

Each rank builds its shard of a tiny model of every family, fills it from the unsharded
model's published tensors through the same ``load_checkpoint_tensor`` path a real
checkpoint takes, runs the forward (with its all-reduces) and must match the unsharded
forward. One spawn runs every case, to keep the suite quick.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bcgprof.errors import ModelConfigError
from bcgprof.models import build_meta, check_tensor_parallel, model_class
from bcgprof.models.tp import check_split
from bcgprof.spec import ModelSpec, detect_family, family_names, resolve_model

from .test_models_tiny import close, inputs, randomize_, tiny_config, write_config

WORLD = 2

# (family, config overrides): every family's tiny config (gpt-oss: sinks, sliding window, biases,
# interleaved expert gate/up, 2 KV heads split; Llama: attention and MLP biases), and KV heads fewer
# than the ranks (replicated)
CASES = [(family, {}) for family in family_names()] + [
    ("gpt_oss", {"num_key_value_heads": 1}),  # 1 KV head replicated on both ranks
    ("llama", {"num_key_value_heads": 1}),
    ("qwen3", {"num_key_value_heads": 1}),
    ("qwen3_moe", {"mlp_only_layers": [1]}),  # MoE layers and a dense one
]


def _init(rank: int, world: int, init_file: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)


def _shard_from(full, config: dict, family: str, rank: int, world: int):
    """Rank ``rank``'s shard, every parameter filled from ``full``'s published tensors."""
    shard = model_class(family)(config, tp_rank=rank, tp_size=world)
    with torch.no_grad():
        for p in shard.parameters():
            p.fill_(float("nan"))  # a parameter the checkpoint path misses shows up as NaN
    assert shard.checkpoint_shapes() == full.checkpoint_shapes()  # published (full) shapes
    for name in shard.checkpoint_shapes():
        shard.load_checkpoint_tensor(name, full.checkpoint_tensor(name))
    for name, p in shard.named_parameters():
        assert not p.isnan().any(), f"{name} was not filled from the checkpoint"
    shard.reset_buffers()
    return shard.eval()


def _models_rank(rank: int, world: int, init_file: str, ckpt_dir: str) -> None:
    _init(rank, world, init_file)
    try:
        for family, overrides in CASES:
            config = tiny_config(family, **overrides)
            full = model_class(family)(config).eval()
            randomize_(full, seed=0)
            shard = _shard_from(full, config, family, rank, world)
            ids, pos = inputs(config["vocab_size"], 24, offset=3, seed=1)
            with torch.no_grad():
                ref, out = full(ids, pos), shard(ids, pos)
            try:
                close(out, ref, full.args)
            except AssertionError as e:
                raise AssertionError(f"rank {rank} {family} {overrides}: {e}") from None

        # A safetensors checkpoint in the published layout, loaded sharded through models.load.
        from bcgprof import models

        full = models.load(ckpt_dir, weights="safetensors", device="cpu", dtype=torch.float32)
        shard = models.load(
            ckpt_dir,
            weights="safetensors",
            device="cpu",
            dtype=torch.float32,
            tp_rank=rank,
            tp_size=world,
        )
        attn = shard.layers[0].self_attn
        assert (attn.num_heads, attn.num_kv_heads) == (4, 1)
        ids, pos = inputs(256, 17, seed=2)
        with torch.no_grad():
            close(shard(ids, pos), full(ids, pos), full.args)
    finally:
        dist.destroy_process_group()


def test_sharded_forward_equals_unsharded_for_every_family(tmp_path):
    from safetensors.torch import save_file

    config = tiny_config("gpt_oss")
    full = model_class("gpt_oss")(config).eval()
    randomize_(full, seed=3)
    ckpt = write_config(tmp_path / "ckpt", config)
    save_file(
        {n: full.checkpoint_tensor(n).contiguous() for n in full.checkpoint_shapes()},
        str(ckpt / "model.safetensors"),
    )
    mp.spawn(_models_rank, args=(WORLD, str(tmp_path / "init"), str(ckpt)), nprocs=WORLD, join=True)


# ---------------------------------------------------------------- shapes and errors (no processes)


def _spec(config: dict) -> ModelSpec:
    return ModelSpec(
        name="tiny",
        source="path",
        config_path=Path("config.json"),
        checkpoint_dir=None,
        family=detect_family(config, "tiny"),
        config=config,
    )


@pytest.mark.parametrize("tp", [2, 4])
def test_gpt_oss_120b_shards_split_heads_and_expert_intermediate(tp):
    full = build_meta("gpt-oss-120b", num_layers=2)
    shards = [build_meta("gpt-oss-120b", num_layers=2, tp_rank=r, tp_size=tp) for r in range(tp)]
    attn, experts = shards[-1].layers[1].self_attn, shards[-1].layers[1].mlp.experts
    assert attn.num_heads == 64 // tp and attn.num_kv_heads == 8 // tp
    assert attn.kv_head_start == (tp - 1) * (8 // tp)
    assert tuple(experts.gate_up_proj.shape) == (128, 2880, 2 * 2880 // tp)
    assert tuple(experts.down_proj.shape) == (128, 2880 // tp, 2880)
    for s in shards:  # the loader checks a checkpoint against the published shapes
        assert s.checkpoint_shapes() == full.checkpoint_shapes()
    # everything but the replicated parts (embedding, norms, router, o_proj/down biases) is split
    replicated = sum(
        p.numel()
        for n, p in full.named_parameters()
        if "embed" in n
        or "norm" in n
        or "router" in n
        or n.endswith(("o_proj.bias", "down_proj_bias"))
    )
    split = sum(p.numel() for p in full.parameters()) - replicated
    for s in shards:
        assert sum(p.numel() for p in s.parameters()) == replicated + split // tp


def test_kv_heads_fewer_than_ranks_are_replicated():
    config = tiny_config("llama", num_attention_heads=8, num_key_value_heads=2)
    starts = [
        model_class("llama")(config, tp_rank=r, tp_size=4).layers[0].self_attn.kv_head_start
        for r in range(4)
    ]
    assert starts == [0, 0, 1, 1]  # query heads 0-3 read KV head 0, heads 4-7 KV head 1


@pytest.mark.parametrize(
    "family, overrides, tp, message",
    [
        ("gpt_oss", {}, 3, "num_attention_heads 8 is not divisible by 3"),
        ("llama", {"intermediate_size": 90}, 4, "intermediate_size 90 is not divisible by 4"),
        (
            "qwen3_moe",
            {"moe_intermediate_size": 30},
            4,
            "expert moe_intermediate_size 30 is not divisible by 4",
        ),
        (
            "gpt_oss",
            {"intermediate_size": 30},
            4,
            "expert intermediate_size 30 is not divisible by 4",
        ),
        (
            "llama",
            {"num_attention_heads": 6, "num_key_value_heads": 3},
            2,
            "num_key_value_heads 3 neither divides by 2 nor divides it",
        ),
    ],
)
def test_splits_that_do_not_divide_fail_in_one_line(family, overrides, tp, message):
    config = tiny_config(family, **overrides)
    with pytest.raises(ModelConfigError, match=message) as info:
        build_meta(_spec(config), tp_rank=0, tp_size=tp)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(
        f"cannot split the {family} stack over {tp} tensor-parallel ranks"
    )


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_check_tensor_parallel_passes_splits_that_work(tp):
    check_tensor_parallel(resolve_model("gpt-oss-120b"), tp)


@pytest.mark.parametrize(
    "name, tp, message",
    [
        (
            "gpt-oss-120b",
            3,
            "gpt-oss-120b: cannot split the gpt_oss stack over 3 tensor-parallel ranks: "
            "num_attention_heads 64 is not divisible by 3; num_key_value_heads 8 neither divides "
            "by 3",
        ),
        (
            "Qwen3-30B-A3B",
            64,
            "Qwen3-30B-A3B: cannot split the qwen3_moe stack over 64 tensor-parallel ranks: "
            "num_attention_heads 32 is not divisible by 64",
        ),
    ],
)
def test_check_tensor_parallel_names_the_model_in_one_line(name, tp, message):
    with pytest.raises(ModelConfigError) as info:
        check_tensor_parallel(resolve_model(name), tp)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{name}: ") and str(info.value).endswith(
        "; pick a --tp that divides them"
    )
    assert "\n" not in str(info.value)


def test_tp_rank_outside_the_group_and_bad_sizes():
    config = tiny_config("qwen3")
    with pytest.raises(ModelConfigError, match=r"rank 2 is outside 0..1"):
        build_meta(_spec(config), tp_rank=2, tp_size=2)
    with pytest.raises(ModelConfigError, match="positive integer"):
        check_split(model_class("qwen3").read_args(config), 0)


def test_unsharded_stack_is_unchanged_by_default():
    config = tiny_config("gpt_oss")
    a, b = build_meta(_spec(config)), build_meta(_spec(config), tp_rank=0, tp_size=1)
    assert [(n, p.shape) for n, p in a.named_parameters()] == [
        (n, p.shape) for n, p in b.named_parameters()
    ]
    assert all(t.source == () for t in a.checkpoint_targets().values())
