"""Model presets and config.json resolution.

A model is named by a preset (``gpt-oss-20b``), a path to a ``config.json``, or a
checkpoint directory holding one. Everything downstream reads the Hugging Face
field names; this module only finds the file, parses it and says which family it is.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from bcgprof.errors import ModelConfigError

# architectures / model_type -> our family module name
FAMILIES = {
    "GptOssForCausalLM": "gpt_oss",
    "LlamaForCausalLM": "llama",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
MODEL_TYPES = {"gpt_oss": "gpt_oss", "llama": "llama", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe"}


def presets_dir() -> Path:
    """configs/models of the source tree, or the copy installed beside the package."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "configs" / "models", here / "presets" / "models"):
        if candidate.is_dir():
            return candidate
    raise ModelConfigError("bcgprof's model presets are missing; reinstall bcgprof")


def list_presets() -> list[str]:
    return sorted(p.stem for p in presets_dir().glob("*.json"))


@dataclass(frozen=True)
class ModelSpec:
    """A resolved model: where its config came from and what it says."""

    name: str  # preset name, or the path as given
    source: str  # "preset" or "path"
    config_path: Path
    checkpoint_dir: Path | None  # the directory holding config.json when given a path
    family: str
    config: dict = field(repr=False, hash=False, compare=False)
    config_hash: str = ""

    @property
    def hidden_size(self) -> int:
        return int(self.config["hidden_size"])

    @property
    def num_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def dtype(self) -> str:
        """The checkpoint's dtype name (``torch_dtype`` or the newer ``dtype`` key)."""
        name = self.config.get("torch_dtype") or self.config.get("dtype") or "bfloat16"
        return str(name).replace("torch.", "")


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _family(config: dict, where: str) -> str:
    archs = config.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        raise ModelConfigError(f"{where}: architectures must be a list of names such as [\"LlamaForCausalLM\"], "
                               f"got {_shown(archs)}; fix the config.json")
    mt = config.get("model_type")
    if mt is not None and not isinstance(mt, str):
        raise ModelConfigError(f"{where}: model_type must be a name such as \"llama\", got {_shown(mt)}; "
                               "fix the config.json")
    for arch in archs or []:
        if arch in FAMILIES:
            return FAMILIES[arch]
    if mt in MODEL_TYPES:
        return MODEL_TYPES[mt]
    supported = ", ".join(sorted(FAMILIES))
    found = _shown(archs) if archs else (_shown(mt) if mt else "nothing")
    raise ModelConfigError(
        f"{where}: unsupported architecture {found}; bcgprof supports {supported}"
    )


def config_hash(config: dict) -> str:
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _read_json(path: Path) -> dict:
    try:
        config = json.loads(path.read_bytes().decode("utf-8-sig"))
    except OSError as e:
        raise ModelConfigError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ModelConfigError(f"{path} is not UTF-8 text (byte at offset {e.start}); fix or re-download it") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{path} is not valid JSON (line {e.lineno}: {e.msg}); fix or re-download it") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer of thousands of digits, or nesting too deep
        raise ModelConfigError(f"{path} is not usable JSON ({str(e).splitlines()[0][:100]}); "
                               "fix or re-download it") from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{path} is not a config.json object")
    return config


REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def resolve_model(model: str) -> ModelSpec:
    """Preset name, config.json path or checkpoint directory -> ModelSpec."""
    presets = {p.lower(): p for p in list_presets()}
    path = Path(model).expanduser()
    if model.lower() in presets and not path.exists():
        name = presets[model.lower()]
        config_path, source, ckpt = presets_dir() / f"{name}.json", "preset", None
    elif path.is_dir():
        config_path, source, ckpt, name = path / "config.json", "path", path, model
        if not config_path.is_file():
            raise ModelConfigError(f"{path} holds no config.json; pass a checkpoint directory or a preset")
    elif path.is_file():
        config_path, source, ckpt, name = path, "path", path.parent, model
    else:
        raise ModelConfigError(
            f"unknown model {model!r}: not a preset ({', '.join(list_presets())}) nor an existing path"
        )
    config = _read_json(config_path)
    family = _family(config, str(config_path))
    missing = [k for k in REQUIRED if not isinstance(config.get(k), int) or isinstance(config[k], bool)
               or config[k] <= 0]
    if missing:
        raise ModelConfigError(f"{config_path}: missing or invalid {', '.join(missing)}")
    return ModelSpec(name, source, config_path, ckpt, family, config, config_hash(config))
