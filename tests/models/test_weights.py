"""Dummy weights and the safetensors loader.

The loader is tested through a small stand-in module that implements the three-method
contract of the architecture modules (checkpoint_shapes, ignores_checkpoint_name,
load_checkpoint_tensor), with gpt-oss-like names, including MXFP4 experts.
"""

import json
import re
import weakref

import pytest
import safetensors
import torch
from safetensors.torch import save_file
from torch import nn

from bcgprof.errors import BcgprofError, ModelConfigError
from bcgprof.models.weights import (
    CheckpointError,
    count_parameters,
    init_dummy,
    load_safetensors,
    parameter_bytes,
)

from tolerances import model_close

reference_dequant = pytest.importorskip(
    "transformers.integrations.mxfp4"
).convert_moe_packed_tensors

CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 32,
    "num_local_experts": 2,
    "vocab_size": 50,
    "num_hidden_layers": 2,
    "initializer_range": 0.05,
}
EXPERTS = ("gate_up_proj", "down_proj")


def _holder(**params) -> nn.Module:
    m = nn.Module()
    for name, value in params.items():
        setattr(m, name, value)
    return m


def _param(*shape) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape))


class TinyLayer(nn.Module):
    def __init__(self, h, i, e, reverse=False):
        super().__init__()
        parts = {
            "input_layernorm": lambda: _holder(weight=_param(h)),
            "self_attn": lambda: _holder(q_proj=nn.Linear(h, h, bias=True), sinks=_param(4)),
            "post_attention_layernorm": lambda: _holder(weight=_param(h)),
            "mlp": lambda: _holder(
                router=nn.Linear(h, e, bias=True),
                experts=_holder(
                    gate_up_proj=_param(e, h, 2 * i),
                    gate_up_proj_bias=_param(e, 2 * i),
                    down_proj=_param(e, i, h),
                ),
            ),
        }
        for name in reversed(parts) if reverse else parts:
            setattr(self, name, parts[name]())


class Tiny(nn.Module):
    """gpt-oss-shaped stack; ``reverse`` builds the same parameters in another order."""

    def __init__(self, config=CONFIG, num_layers=None, reverse=False):
        super().__init__()
        self.config = config
        self.num_layers = num_layers or config["num_hidden_layers"]
        h, i, e = config["hidden_size"], config["intermediate_size"], config["num_local_experts"]
        parts = {
            "embed_tokens": lambda: nn.Embedding(config["vocab_size"], h),
            "layers": lambda: nn.ModuleList(
                TinyLayer(h, i, e, reverse) for _ in range(self.num_layers)
            ),
            "norm": lambda: _holder(weight=_param(h)),
        }
        for name in reversed(parts) if reverse else parts:
            setattr(self, name, parts[name]())
        self.register_buffer("inv_freq", torch.full((8,), 7.0), persistent=False)

    # the contract
    def checkpoint_shapes(self):
        return {"model." + n: tuple(p.shape) for n, p in self.named_parameters()}

    def ignores_checkpoint_name(self, name):
        m = re.match(r"model\.layers\.(\d+)\.", name)
        return (
            name.startswith("lm_head.")
            or "rotary_emb" in name
            or (m is not None and int(m[1]) >= self.num_layers)
        )

    def load_checkpoint_tensor(self, name, tensor):
        self.get_parameter(name.removeprefix("model.")).copy_(tensor)


def tiny(**kw):
    torch.manual_seed(1234)  # nn.Linear's own init, to be overwritten
    return Tiny(**kw)


# ---------------------------------------------------------------------------------------
# dummy init


def test_dummy_same_seed_same_weights_other_seed_other_weights():
    a, b, c = tiny(), tiny(), tiny()
    torch.manual_seed(0)  # the global RNG must play no part
    init_dummy(a, seed=7)
    torch.manual_seed(99)
    init_dummy(b, seed=7)
    init_dummy(c, seed=8)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        if "norm" not in name and not name.endswith("bias"):
            assert not torch.equal(pa, pc), name


def test_dummy_does_not_depend_on_construction_order():
    a, b = tiny(), tiny(reverse=True)
    assert [n for n, _ in a.named_parameters()] != [n for n, _ in b.named_parameters()]
    init_dummy(a, seed=3)
    init_dummy(b, seed=3)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


def test_dummy_values_are_sensible():
    m = tiny()
    init_dummy(m, seed=0)
    params = dict(m.named_parameters())
    for name, p in params.items():
        if name.endswith("norm.weight"):
            assert torch.equal(p, torch.ones_like(p)), name
        elif name.endswith("bias"):
            assert torch.equal(p, torch.zeros_like(p)), name
        elif p.numel() >= 1000:  # enough samples for the statistics to be tight
            # initializer_range
            assert abs(p.mean().item()) < 0.01 and p.std().item() == pytest.approx(0.05, rel=0.1), (
                name
            )
        else:
            assert 0 < p.abs().max() < 0.25, name
    # parameters of the same shape are not copies of each other
    assert not torch.equal(
        params["layers.0.self_attn.q_proj.weight"], params["layers.1.self_attn.q_proj.weight"]
    )
    assert torch.equal(m.inv_freq, torch.full((8,), 7.0))  # buffers untouched


def test_dummy_std_override_and_default():
    m = tiny()
    init_dummy(m, seed=0, std=0.5)
    assert m.embed_tokens.weight.std().item() == pytest.approx(0.5, rel=0.1)
    m = tiny(config={k: v for k, v in CONFIG.items() if k != "initializer_range"})
    init_dummy(m, seed=0)
    assert m.embed_tokens.weight.std().item() == pytest.approx(0.02, rel=0.1)


def test_dummy_in_the_modules_dtype_and_healthy_in_bf16():
    m = tiny().to(torch.bfloat16)
    init_dummy(m, seed=0)
    assert all(p.dtype == torch.bfloat16 for p in m.parameters())
    # a residual stack of these weights stays finite and of order one
    x = m.embed_tokens(torch.arange(50))
    for layer in m.layers:
        h = (
            x
            * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype)
            * layer.input_layernorm.weight
        )
        x = x + layer.self_attn.q_proj(h)
    assert torch.isfinite(x).all() and x.float().std() < 10


def test_dummy_refuses_meta():
    with torch.device("meta"):
        m = Tiny()
    with pytest.raises(ValueError, match="meta"):
        init_dummy(m, seed=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_dummy_on_cuda_reproducible_and_never_on_host():
    with torch.device("meta"):
        a, b = Tiny(), Tiny(reverse=True)
    a, b = a.to_empty(device="cuda"), b.to_empty(device="cuda")
    init_dummy(a, seed=5)
    init_dummy(b, seed=5)
    for name, p in a.named_parameters():
        assert p.device.type == "cuda"
        assert torch.equal(p, b.get_parameter(name)), name


# ---------------------------------------------------------------------------------------
# parameter counts


def test_counts_on_meta():
    with torch.device("meta"):
        m = Tiny().to(torch.bfloat16)
    h, i, e, v = 64, 32, 2, 50
    per_layer = 2 * h + (h * h + h + 4) + (h * e + e) + (e * h * 2 * i + e * 2 * i + e * i * h)
    want = v * h + 2 * per_layer + h
    assert count_parameters(m) == want
    assert parameter_bytes(m) == 2 * want


# ---------------------------------------------------------------------------------------
# safetensors


def random_checkpoint(model: Tiny, *, mxfp4=True, extras=True, seed=0):
    """Checkpoint tensors for ``model`` (MXFP4 experts as blocks + scales) and what they load as."""
    gen = torch.Generator().manual_seed(seed)
    tensors, want = {}, {}
    for name, shape in model.checkpoint_shapes().items():
        stem = name.rsplit(".", 1)[-1]
        if mxfp4 and stem in EXPERTS:
            e, rows_out, cols = shape  # dequantised [E, G*32, R] <- packed [E, R, G, 16]
            blocks = torch.randint(
                0, 256, (e, cols, rows_out // 32, 16), dtype=torch.uint8, generator=gen
            )
            scales = torch.randint(
                118, 131, (e, cols, rows_out // 32), dtype=torch.uint8, generator=gen
            )
            tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
            want[name] = reference_dequant(blocks.clone(), scales.clone()).float()
        else:
            t = torch.randn(shape, generator=gen).to(torch.bfloat16)
            tensors[name], want[name] = t, t.float()
    if extras:  # what a published checkpoint holds beyond our stack
        tensors["lm_head.weight"] = torch.randn(50, 64).to(torch.bfloat16)
        tensors[f"model.layers.{model.num_layers}.self_attn.q_proj.weight"] = torch.randn(64, 64)
        tensors[f"model.layers.{model.num_layers}.mlp.experts.down_proj_blocks"] = torch.zeros(
            2, 64, 1, 16, dtype=torch.uint8
        )
        tensors[f"model.layers.{model.num_layers}.mlp.experts.down_proj_scales"] = torch.zeros(
            2, 64, 1, dtype=torch.uint8
        )
    return tensors, want


def write_sharded(tmp_path, tensors, shards=2, by=None):
    """Shards + index file; ``by(name) -> shard number`` decides placement (default: round
    robin)."""
    names = sorted(tensors)
    by = by or (lambda n: names.index(n) % shards)
    weight_map = {}
    for k in range(shards):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names if by(n) == k}
        save_file(part, tmp_path / fname)
        weight_map.update({n: fname for n in part})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )


def assert_loaded(model, want):
    for name, value in want.items():
        got = model.get_parameter(name.removeprefix("model."))
        assert torch.equal(got, value), name


def test_round_trip_single_file(tmp_path):
    model = tiny()
    tensors, want = random_checkpoint(model)
    save_file(tensors, tmp_path / "model.safetensors")
    init_dummy(model, seed=0)
    load_safetensors(model, tmp_path)
    assert_loaded(model, want)
    assert torch.equal(model.inv_freq, torch.full((8,), 7.0))


def test_round_trip_unquantised_bf16_module(tmp_path):
    model = tiny().to(torch.bfloat16)
    tensors, want = random_checkpoint(model, mxfp4=False, extras=False)
    save_file(tensors, tmp_path / "weights.safetensors")
    load_safetensors(model, tmp_path)
    for name, value in want.items():
        assert torch.equal(model.get_parameter(name.removeprefix("model.")).float(), value), name


def test_sharded_with_index(tmp_path):
    model = tiny()
    tensors, want = random_checkpoint(model)
    # a blocks + scales pair split over two shards must still meet
    pair = "model.layers.0.mlp.experts.gate_up_proj"
    write_sharded(
        tmp_path,
        tensors,
        shards=3,
        by=lambda n: 2 if n == pair + "_scales" else 0 if n == pair + "_blocks" else len(n) % 2,
    )
    (tmp_path / "stray.safetensors").write_bytes(b"not named by the index: never opened")
    load_safetensors(model, tmp_path)
    assert_loaded(model, want)


def test_fewer_layers_than_the_checkpoint(tmp_path):
    full = tiny()
    tensors, _ = random_checkpoint(full, extras=False)
    save_file(tensors, tmp_path / "model.safetensors")
    short = tiny(num_layers=1)
    load_safetensors(short, tmp_path)
    assert torch.equal(
        short.layers[0].self_attn.q_proj.weight,
        tensors["model.layers.0.self_attn.q_proj.weight"].float(),
    )


class Tracker:
    """Wraps safetensors.safe_open and counts the tensors read that are still alive."""

    def __init__(self, real, fail_on_read=False):
        self.real, self.fail_on_read = real, fail_on_read
        self.live = self.peak = self.reads = 0

    def _dead(self):
        self.live -= 1

    def __call__(self, *args, **kwargs):
        tracker, handle = self, self.real(*args, **kwargs)

        class Handle:
            def __enter__(self):
                handle.__enter__()
                return self

            def __exit__(self, *exc):
                return handle.__exit__(*exc)

            def keys(self):
                return handle.keys()

            def get_slice(self, name):
                return handle.get_slice(name)

            def get_tensor(self, name):
                if tracker.fail_on_read:
                    raise AssertionError("tensor data read")
                t = handle.get_tensor(name)
                tracker.reads += 1
                tracker.live += 1
                tracker.peak = max(tracker.peak, tracker.live)
                weakref.finalize(t, tracker._dead)
                return t

        return Handle()


@pytest.mark.parametrize("mxfp4", [False, True])
def test_streams_one_tensor_at_a_time(tmp_path, monkeypatch, mxfp4):
    model = tiny()
    tensors, want = random_checkpoint(model, mxfp4=mxfp4)
    write_sharded(tmp_path, tensors, shards=2)
    tracker = Tracker(safetensors.safe_open)
    monkeypatch.setattr(safetensors, "safe_open", tracker)
    load_safetensors(model, tmp_path)
    assert_loaded(model, want)
    # every tensor the model needs was read once; ignored ones were never read
    assert tracker.reads == len(want) + (len(EXPERTS) * model.num_layers if mxfp4 else 0)
    assert tracker.peak == (2 if mxfp4 else 1)  # a blocks + scales pair at most
    assert tracker.live == 0


def test_tracker_sees_tensors_kept_alive(tmp_path, monkeypatch):
    # the streaming test's counter is real: a loader that keeps what it read is caught
    model = tiny()
    tensors, _ = random_checkpoint(model, mxfp4=False)
    save_file(tensors, tmp_path / "model.safetensors")
    tracker = Tracker(safetensors.safe_open)
    monkeypatch.setattr(safetensors, "safe_open", tracker)
    kept = []
    monkeypatch.setattr(model, "load_checkpoint_tensor", lambda name, t: kept.append(t))
    load_safetensors(model, tmp_path)
    assert tracker.peak == tracker.reads == len(kept) > 2


# ---------------------------------------------------------------------------------------
# errors: one line, naming what is wrong


def load_error(model, path) -> str:
    with pytest.raises(CheckpointError) as err:
        load_safetensors(model, path)
    message = str(err.value)
    assert "\n" not in message and message
    assert isinstance(err.value, ModelConfigError) and isinstance(err.value, BcgprofError)
    return message


def test_missing_tensor(tmp_path):
    model = tiny()
    tensors, _ = random_checkpoint(model)
    del tensors["model.norm.weight"]
    save_file(tensors, tmp_path / "model.safetensors")
    message = load_error(model, tmp_path)
    assert "1 missing: model.norm.weight" in message


def test_many_missing_are_counted(tmp_path):
    model = tiny()
    tensors, _ = random_checkpoint(model)
    gone = [n for n in tensors if n.startswith("model.layers.1.")]
    for n in gone:
        del tensors[n]
    save_file(tensors, tmp_path / "model.safetensors")
    message = load_error(model, tmp_path)
    n_missing = len([n for n in model.checkpoint_shapes() if n.startswith("model.layers.1.")])
    assert f"{n_missing} missing: " in message and f"and {n_missing - 3} more" in message


def test_unexpected_tensor(tmp_path):
    model = tiny()
    tensors, _ = random_checkpoint(model)
    tensors["model.layers.0.mlp.shared_expert.weight"] = torch.zeros(3)
    save_file(tensors, tmp_path / "model.safetensors")
    assert "1 unexpected: model.layers.0.mlp.shared_expert.weight" in load_error(model, tmp_path)


def test_shape_mismatch_names_both_shapes(tmp_path):
    model = tiny()
    tensors, _ = random_checkpoint(model)
    tensors["model.layers.1.self_attn.q_proj.weight"] = torch.zeros(32, 64)
    tensors["model.layers.0.mlp.experts.down_proj_blocks"] = torch.zeros(
        2, 64, 2, 16, dtype=torch.uint8
    )
    tensors["model.layers.0.mlp.experts.down_proj_scales"] = torch.zeros(
        2, 64, 2, dtype=torch.uint8
    )
    save_file(tensors, tmp_path / "model.safetensors")
    message = load_error(model, tmp_path)
    assert "model.layers.1.self_attn.q_proj.weight [32, 64] vs [64, 64]" in message
    assert "model.layers.0.mlp.experts.down_proj [2, 64, 64] vs [2, 32, 64]" in message


def test_unpaired_mxfp4(tmp_path):
    model = tiny()
    tensors, _ = random_checkpoint(model)
    del tensors["model.layers.0.mlp.experts.down_proj_scales"]
    save_file(tensors, tmp_path / "model.safetensors")
    assert "model.layers.0.mlp.experts.down_proj_blocks" in load_error(model, tmp_path)


def test_all_problems_in_one_message_before_any_data_is_read(tmp_path, monkeypatch):
    model = tiny()
    init_dummy(model, seed=0)
    before = {n: p.clone() for n, p in model.named_parameters()}
    tensors, _ = random_checkpoint(model)
    del tensors["model.embed_tokens.weight"]
    tensors["model.extra"] = torch.zeros(1)
    tensors["model.norm.weight"] = torch.zeros(65)
    write_sharded(tmp_path, tensors)
    monkeypatch.setattr(safetensors, "safe_open", Tracker(safetensors.safe_open, fail_on_read=True))
    message = load_error(model, tmp_path)
    assert (
        "model.embed_tokens.weight" in message
        and "model.extra" in message
        and "[65] vs [64]" in message
    )
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n


def test_corrupt_file_is_named(tmp_path):
    model = tiny()
    tensors, _ = random_checkpoint(model)
    write_sharded(tmp_path, tensors)
    bad = tmp_path / "model-00002-of-00002.safetensors"
    bad.write_bytes(b"\x00garbage" * 100)
    message = load_error(model, tmp_path)
    assert str(bad) in message and "re-download" in message


def test_truncated_file_is_named(tmp_path):
    model = tiny()
    tensors, _ = random_checkpoint(model)
    path = tmp_path / "model.safetensors"
    save_file(tensors, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert str(path) in load_error(model, tmp_path)


def test_empty_directory(tmp_path):
    message = load_error(tiny(), tmp_path)
    assert str(tmp_path) in message and "no *.safetensors" in message


def test_index_naming_an_absent_shard(tmp_path):
    model = tiny()
    tensors, _ = random_checkpoint(model)
    write_sharded(tmp_path, tensors)
    (tmp_path / "model-00001-of-00002.safetensors").unlink()
    assert "model-00001-of-00002.safetensors" in load_error(model, tmp_path)


def test_unreadable_index(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text("{not json")
    assert "model.safetensors.index.json" in load_error(tiny(), tmp_path)


# ---------------------------------------------------------------------------------------
# a real family: a tiny gpt-oss checkpoint in the published layout, through models.load


def tiny_gpt_oss(tmp_path, num_layers=3, extra_layers=1, seed=0):
    """config.json + model.safetensors shaped like openai/gpt-oss-20b, only small.

    Returns the checkpoint tensors and the dequantised experts (transformers' reference)."""
    from bcgprof.spec import presets_dir

    H, I, E, V, heads, kv, d = 64, 64, 4, 100, 4, 2, 16
    config = json.loads((presets_dir() / "gpt-oss-20b.json").read_text())
    config.update(
        hidden_size=H,
        intermediate_size=I,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=d,
        num_local_experts=E,
        num_experts_per_tok=2,
        experts_per_token=2,
        num_hidden_layers=num_layers,
        vocab_size=V,
        pad_token_id=V - 1,
        eos_token_id=V - 2,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"] * num_layers,
    )
    config["layer_types"] = config["layer_types"][:num_layers]
    (tmp_path / "config.json").write_text(json.dumps(config))

    gen = torch.Generator().manual_seed(seed)

    def rn(*shape, std=0.1):
        return (torch.randn(*shape, generator=gen) * std).to(torch.bfloat16)

    tensors = {
        "model.embed_tokens.weight": rn(V, H, std=1.0),
        "model.norm.weight": 1 + rn(H),
        "lm_head.weight": rn(V, H),
    }
    experts = {}
    for i in range(num_layers + extra_layers):
        p = f"model.layers.{i}."
        tensors.update(
            {
                p + "input_layernorm.weight": 1 + rn(H),
                p + "post_attention_layernorm.weight": 1 + rn(H),
                p + "self_attn.q_proj.weight": rn(heads * d, H),
                p + "self_attn.q_proj.bias": rn(heads * d),
                p + "self_attn.k_proj.weight": rn(kv * d, H),
                p + "self_attn.k_proj.bias": rn(kv * d),
                p + "self_attn.v_proj.weight": rn(kv * d, H),
                p + "self_attn.v_proj.bias": rn(kv * d),
                p + "self_attn.o_proj.weight": rn(H, heads * d),
                p + "self_attn.o_proj.bias": rn(H),
                p + "self_attn.sinks": rn(heads, std=1.0),
                p + "mlp.router.weight": rn(E, H, std=1.0),
                p + "mlp.router.bias": rn(E),
                p + "mlp.experts.gate_up_proj_bias": rn(E, 2 * I),
                p + "mlp.experts.down_proj_bias": rn(E, H),
            }
        )
        # packed as published: gate_up [E, 2I, H/32, 16], down [E, H, I/32, 16]
        for name, rows, cols in (("gate_up_proj", 2 * I, H), ("down_proj", H, I)):
            blocks = torch.randint(
                0, 256, (E, rows, cols // 32, 16), dtype=torch.uint8, generator=gen
            )
            scales = torch.randint(
                118, 124, (E, rows, cols // 32), dtype=torch.uint8, generator=gen
            )
            tensors[f"{p}mlp.experts.{name}_blocks"], tensors[f"{p}mlp.experts.{name}_scales"] = (
                blocks,
                scales,
            )
            experts[f"{p}mlp.experts.{name}"] = reference_dequant(blocks.clone(), scales.clone())
    save_file(tensors, tmp_path / "model.safetensors")
    return config, tensors, experts


def test_gpt_oss_mxfp4_checkpoint_loads_and_matches_transformers(tmp_path):
    from bcgprof.models import load

    transformers = pytest.importorskip("transformers")
    L = 3
    config, tensors, experts = tiny_gpt_oss(tmp_path, num_layers=L)
    ours = load(tmp_path, weights="safetensors", device="cpu", dtype=torch.float32)
    for i in range(L):
        for name in EXPERTS:
            got = ours.get_parameter(f"layers.{i}.mlp.experts.{name}")
            assert torch.equal(got, experts[f"model.layers.{i}.mlp.experts.{name}"].float()), (
                i,
                name,
            )

    # the same weights in transformers' own gpt-oss, experts from its reference dequantisation
    hf_config = transformers.GptOssConfig(
        **{k: v for k, v in config.items() if k != "quantization_config"},
        attn_implementation="eager",
    )
    theirs = transformers.GptOssForCausalLM(hf_config).float().eval()
    state = {
        k: v
        for k, v in {**tensors, **experts}.items()
        if not k.endswith(("_blocks", "_scales")) and not k.startswith(f"model.layers.{L}.")
    }
    missing, unexpected = theirs.load_state_dict(
        {k: v.float() for k, v in state.items()}, strict=False
    )
    assert not missing and not unexpected
    ids = torch.randint(0, config["vocab_size"], (12,), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(12)
    with torch.no_grad():
        want = theirs.model(input_ids=ids[None], position_ids=positions[None]).last_hidden_state[0]
        got = ours(ids, positions)
    # MXFP4 values are exact in float32, so both run the same float32 sums in their own orders
    torch.testing.assert_close(
        got, want, **model_close(ours.args, keys=len(ids), scale=want.abs().max().item())
    )


def test_gpt_oss_mxfp4_checkpoint_in_bf16_and_truncated(tmp_path):
    from bcgprof.models import load

    _, tensors, experts = tiny_gpt_oss(tmp_path, num_layers=3)
    ours = load(tmp_path, weights="safetensors", device="cpu", dtype=torch.bfloat16, num_layers=1)
    assert len(ours.layers) == 1
    # MXFP4 values are exact in bf16: dequantised straight into the module's dtype
    got = ours.layers[0].mlp.experts.down_proj
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, experts["model.layers.0.mlp.experts.down_proj"])
    assert torch.equal(ours.embed_tokens.weight, tensors["model.embed_tokens.weight"])


def test_gpt_oss_checkpoint_for_another_config_is_refused(tmp_path):
    from bcgprof.models import load

    config, _, _ = tiny_gpt_oss(tmp_path)
    config["num_local_experts"] = 8  # the config says 8 experts, the weights hold 4
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as err:
        load(tmp_path, weights="safetensors", device="cpu", dtype=torch.float32)
    message = str(err.value)
    assert "\n" not in message
    # 3 layers x (router weight and bias, 2 expert tensors and their biases); the first few shown
    assert "18 with a different shape (checkpoint vs model): " in message
    # named after dequantising
    assert "model.layers.0.mlp.experts.down_proj [4, 64, 64] vs [8, 64, 64]" in message
    assert "and 15 more" in message
