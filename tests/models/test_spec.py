"""bcgprof.spec: the family registry read from the presets, family detection, the attention
shape, the one KV-cache formula and the capture check, and that a new family needs exactly
one model file and one preset."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

import bcgprof.models
from bcgprof.errors import ModelConfigError
from bcgprof.models import build_meta, kvcache, model_class
from bcgprof.models.stack import DecoderModel
from bcgprof.spec import (
    AttentionShape,
    ModelSpec,
    attention_shape,
    check_capturable,
    detect_family,
    families,
    family_names,
    get_family,
    kv_bytes_per_token,
    kv_cache_bytes,
    presets_dir,
    read_config,
    registry,
    resolve_model,
)

from .test_models_tiny import inputs, randomize_, shrunk_preset, tiny_config

MODELS_DIR = Path(bcgprof.models.__file__).parent


def _presets(tmp_path: Path, monkeypatch, configs: dict[str, dict]) -> Path:
    """A presets directory holding ``configs`` ({name: config}), in the registry's place."""
    directory = tmp_path / "presets"
    directory.mkdir()
    for name, config in configs.items():
        (directory / f"{name}.json").write_text(json.dumps(config))
    monkeypatch.setattr(registry, "presets_dir", lambda: directory)
    return directory


def test_the_registry_is_the_presets_model_types_with_their_architectures():
    fams = families()
    presets = {p.stem: read_config(p) for p in presets_dir().glob("*.json")}
    assert list(fams) == sorted({c["model_type"] for c in presets.values()}) == family_names()
    for name, family in fams.items():
        declared = {n for n, c in presets.items() if c["model_type"] == name}
        assert set(family.presets) == declared and family.module == f"bcgprof.models.{name}"
        assert set(family.architectures) == {
            a for n in declared for a in presets[n]["architectures"]
        }
    assert fams["gpt_oss"].presets == ("gpt-oss-120b", "gpt-oss-20b")


def test_every_family_class_in_the_model_files_is_registered_and_found():
    defined = {}
    for path in sorted(MODELS_DIR.glob("*.py")):
        module = importlib.import_module(f"bcgprof.models.{path.stem}")
        for cls in vars(module).values():
            if (
                isinstance(cls, type)
                and issubclass(cls, DecoderModel)
                and cls.__module__ == module.__name__
                and cls.family
            ):
                defined[cls.family] = (path.stem, cls)
    assert sorted(defined) == family_names()
    for name, (stem, cls) in defined.items():
        assert (
            stem == name
            and model_class(name) is cls
            and get_family(name).module_file == MODELS_DIR / f"{stem}.py"
        )


def test_detection_prefers_the_architecture_and_falls_back_to_the_model_type():
    assert (
        detect_family({"architectures": ["Foo", "Qwen3MoeForCausalLM"], "model_type": "llama"}, "c")
        == "qwen3_moe"
    )
    assert detect_family({"architectures": ["Foo"], "model_type": "qwen3"}, "c") == "qwen3"
    assert detect_family({"model_type": "gpt_oss"}, "c") == "gpt_oss"
    with pytest.raises(
        ModelConfigError,
        match=r"^c: unsupported architecture \[\"Foo\"\]; bcgprof supports "
        "GptOssForCausalLM, LlamaForCausalLM, Qwen3ForCausalLM, "
        "Qwen3MoeForCausalLM$",
    ):
        detect_family({"architectures": ["Foo"], "model_type": "foo"}, "c")
    with pytest.raises(
        ModelConfigError, match="unsupported model family 'foo'; bcgprof supports gpt_oss, llama"
    ):
        get_family("foo")


@pytest.mark.parametrize(
    "config, message",
    [
        (
            {"architectures": ["ToyForCausalLM"], "model_type": None},
            "model_type must name the family's model file",
        ),
        ({"architectures": ["ToyForCausalLM"], "model_type": "toy-model"}, "model_type must name"),
        (
            {"architectures": "ToyForCausalLM", "model_type": "toy"},
            "architectures must be a list of names",
        ),
        ({"architectures": [], "model_type": "toy"}, "architectures must be a list of names"),
        (
            {"architectures": ["LlamaForCausalLM"], "model_type": "toy"},
            "architecture LlamaForCausalLM is already family llama's",
        ),
    ],
)
def test_a_preset_that_names_its_family_badly_is_one_line(tmp_path, monkeypatch, config, message):
    llama = read_config(presets_dir() / "Llama-3.1-8B.json")
    _presets(tmp_path, monkeypatch, {"A-llama": llama, "Z-toy": dict(llama, **config)})
    with pytest.raises(ModelConfigError, match=message) as info:
        families()
    assert "Z-toy.json" in str(info.value) and "\n" not in str(info.value)


TOY_MODEL = '''"""A family that is Llama under another name (a test's model file)."""

from bcgprof.models.llama import LlamaModel


class ToyModel(LlamaModel):
    family = "toy"
'''


def test_a_new_family_is_one_model_file_and_one_preset(tmp_path, monkeypatch):
    llama = read_config(presets_dir() / "Llama-3.1-8B.json")
    toy = dict(llama, architectures=["ToyForCausalLM"], model_type="toy", num_hidden_layers=2)
    presets = _presets(tmp_path, monkeypatch, {"Llama-3.1-8B": llama, "Toy-1B": toy})
    models = tmp_path / "models"
    models.mkdir()
    (models / "toy.py").write_text(TOY_MODEL)
    monkeypatch.setattr(bcgprof.models, "__path__", [*bcgprof.models.__path__, str(models)])
    monkeypatch.setattr(registry, "MODELS_DIR", models)
    importlib.invalidate_caches()
    try:
        assert family_names() == ["llama", "toy"] and get_family("toy").presets == ("Toy-1B",)
        spec = resolve_model(str(presets / "Toy-1B.json"))
        assert spec.family == "toy"
        check_capturable(spec)
        meta = build_meta(spec, num_layers=1)
        assert (
            type(meta).__name__ == "ToyModel"
            and meta.args.family == "toy"
            and len(meta.layers) == 1
        )
    finally:
        sys.modules.pop("bcgprof.models.toy", None)


def test_a_family_without_its_model_file_is_refused_before_capture(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "MODELS_DIR", tmp_path)
    with pytest.raises(
        ModelConfigError, match=r"family gpt_oss has no model file \(gpt_oss.py in bcgprof/models\)"
    ):
        check_capturable(resolve_model("gpt-oss-20b"))


def test_the_capture_check_names_the_config_of_a_bad_dtype_or_attention(tmp_path):
    for name in ("gpt-oss-20b", "Qwen3-8B"):
        check_capturable(resolve_model(name))
    for overrides, message in (
        ({"torch_dtype": "int8"}, "unsupported dtype 'int8'"),
        (
            {"num_key_value_heads": 3},
            "num_attention_heads 4 is not a multiple of num_key_value_heads 3",
        ),
    ):
        path = tmp_path / f"{len(message)}.json"
        path.write_text(json.dumps(tiny_config("llama", **overrides)))
        with pytest.raises(ModelConfigError) as info:
            check_capturable(resolve_model(str(path)))
        assert str(info.value).startswith(f"{path}: ") and message in str(info.value)


def test_the_attention_shape_reads_defaults_and_refuses_what_does_not_divide():
    assert attention_shape({"hidden_size": 64, "num_attention_heads": 4}) == AttentionShape(
        4, 4, 16
    )
    shape = resolve_model("gpt-oss-20b").attention
    assert (shape.num_heads, shape.num_kv_heads, shape.head_dim) == (64, 8, 64)
    for extra in ({"num_key_value_heads": 0}, {"head_dim": 0}):
        with pytest.raises(ModelConfigError, match="must be positive"):
            attention_shape({"hidden_size": 64, "num_attention_heads": 4, **extra})


@pytest.mark.parametrize("family", family_names())
def test_the_kv_formula_is_what_the_cache_allocates(family):
    model = model_class(family)(
        tiny_config(family, num_key_value_heads=1 if family == "llama" else 2)
    )
    a = model.layers[0].self_attn
    cache = kvcache.allocate(model, seqs=3, context=5, device=torch.device("cpu"))
    width = next(model.parameters()).element_size()
    expected = kv_cache_bytes(
        len(model.layers), a.num_kv_heads, a.head_dim, width, seqs=3, context=5
    )
    assert cache.nbytes == expected == kvcache.cache_bytes(model, 3, 5)
    assert kv_bytes_per_token(len(model.layers), a.num_kv_heads, a.head_dim, width) * 15 == expected


@pytest.mark.parametrize("family", family_names())
def test_a_family_without_a_tiny_config_gets_its_preset_cut_down(family):
    config = shrunk_preset(family)
    assert detect_family(config, "shrunk") == family
    model = model_class(family)(config).eval()
    randomize_(model)
    with torch.no_grad():
        out = model(*inputs(config["vocab_size"], 12))
    assert out.shape == (12, 64) and torch.isfinite(out).all()
    spec = ModelSpec("shrunk", "path", Path("config.json"), None, family, config)
    assert build_meta(spec).num_layers == 3
