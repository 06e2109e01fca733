"""A model named by a preset, a config.json path or a checkpoint directory, resolved to a
:class:`ModelSpec`: where its config came from, what it says, which family it is.

Everything downstream reads the Hugging Face field names; this module only finds the file,
parses it, says which family it is and checks the few fields every command needs. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from bcgprof import dtypes
from bcgprof.errors import ModelConfigError
from bcgprof.inputs import BROKEN_LINK, DIRECTORY, MISSING, kind_of
from bcgprof.spec.presets import list_presets, presets_dir, read_config
from bcgprof.spec.registry import by_architecture, families, get_family
from bcgprof.spec.shapes import AttentionShape, attention_shape

REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


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

    @property
    def attention(self) -> AttentionShape:
        """Heads, KV heads and head dim of the unsharded model (ModelConfigError when
        inconsistent)."""
        return attention_shape(self.config)


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def detect_family(config: dict, where: str) -> str:
    """The family of ``config`` (see :mod:`bcgprof.spec.registry`): that of its first known
    ``architectures`` entry, else its ``model_type``; one ModelConfigError line (``where`` names
    the file) listing the supported architectures otherwise."""
    archs = config.get("architectures")
    if archs is not None and (
        not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)
    ):
        raise ModelConfigError(
            f'{where}: architectures must be a list of names such as ["LlamaForCausalLM"], '
            f"got {_shown(archs)}; fix the config.json"
        )
    mt = config.get("model_type")
    if mt is not None and not isinstance(mt, str):
        raise ModelConfigError(
            f'{where}: model_type must be a name such as "llama", got {_shown(mt)}; '
            "fix the config.json"
        )
    known = by_architecture()
    for arch in archs or []:
        if arch in known:
            return known[arch]
    if mt in families():
        return str(mt)
    supported = ", ".join(known)
    found = _shown(archs) if archs else (_shown(mt) if mt else "nothing")
    raise ModelConfigError(
        f"{where}: unsupported architecture {found}; bcgprof supports {supported}"
    )


def config_hash(config: dict) -> str:
    """16 hex digits of the SHA-256 of ``config`` in canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def resolve_model(model: str) -> ModelSpec:
    """Preset name, config.json path or checkpoint directory -> ModelSpec.

    A preset name (any case) wins unless a path of that name exists. The config must name a
    supported family and hold positive integers for :data:`REQUIRED`; anything else is one
    ModelConfigError line."""
    presets = {p.lower(): p for p in list_presets()}
    path = Path(model).expanduser()
    # never an OSError: a name too long, a loop of links are said in one line
    kind, reason = kind_of(path)
    ckpt: Path | None
    if model.lower() in presets and kind == MISSING:
        name = presets[model.lower()]
        config_path, source, ckpt = presets_dir() / f"{name}.json", "preset", None
    elif kind == DIRECTORY:
        config_path, source, ckpt, name = path / "config.json", "path", path, model
        if kind_of(config_path)[0] == MISSING:
            raise ModelConfigError(
                f"{path} holds no config.json; pass a checkpoint directory or a preset"
            )
    elif kind == MISSING:
        raise ModelConfigError(
            f"unknown model {model!r}: not a preset ({', '.join(list_presets())}) nor an existing "
            "path"
        )
    elif kind == BROKEN_LINK:
        raise ModelConfigError(
            f"--model {model!r} is a symbolic link to nothing; pass a config.json, a checkpoint "
            "directory or a preset"
        )
    elif kind == "unreadable":
        raise ModelConfigError(
            f"cannot read --model {model!r}: {reason}; pass a config.json, a checkpoint "
            "directory or a preset"
        )
    else:  # a regular file, or what read_config refuses by name (a device, a FIFO, a broken link)
        config_path, source, ckpt, name = path, "path", path.parent, model
    config = read_config(config_path)
    family = detect_family(config, str(config_path))
    missing = [
        k
        for k in REQUIRED
        if not isinstance(config.get(k), int) or isinstance(config[k], bool) or config[k] <= 0
    ]
    if missing:
        raise ModelConfigError(f"{config_path}: missing or invalid {', '.join(missing)}")
    return ModelSpec(name, source, config_path, ckpt, family, config, config_hash(config))


def check_capturable(spec: ModelSpec) -> None:
    """What a capture needs of ``spec`` beyond :func:`resolve_model`, checked without torch: a
    model file for its family, a dtype bcgprof builds models in and a consistent attention
    shape. One ModelConfigError line naming the config file otherwise, so that a capture can
    refuse before it imports torch."""
    family = get_family(spec.family)
    if not family.module_file.is_file():
        raise ModelConfigError(
            f"{spec.config_path}: family {family.name} has no model file "
            f"({family.module_file.name} in bcgprof/models); reinstall bcgprof"
        )
    try:
        dtypes.canonical(spec.dtype)
        attention_shape(spec.config)
    except ModelConfigError as e:
        raise ModelConfigError(f"{spec.config_path}: {e}") from None
