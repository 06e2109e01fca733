"""The model families bcgprof can build, read from the presets.

A family is the ``model_type`` of one or more presets; a config is of that family when it
names one of those presets' ``architectures`` (or, naming none of them, that
``model_type``). The family's layer stack is the one :class:`~bcgprof.models.stack.DecoderModel`
subclass in ``bcgprof/models/<family>.py`` whose ``family`` is its name; only the capture side
imports it, on use. Adding a family is therefore its model file and a preset: nothing else
names it, and the tests take the list from here.

Torch-free: the registry reads the presets' JSON and checks that the model files exist,
without importing them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from bcgprof.errors import ModelConfigError
from bcgprof.spec.presets import presets_dir, read_config

# where each family's model file lives
MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


@dataclass(frozen=True)
class Family:
    """One family: its name (the presets' ``model_type``), the HF ``architectures`` it answers
    to and the presets that declare it."""

    name: str
    architectures: tuple[str, ...]
    presets: tuple[str, ...]

    @property
    def module(self) -> str:
        """The import path of the family's model file."""
        return f"bcgprof.models.{self.name}"

    @property
    def module_file(self) -> Path:
        return MODELS_DIR / f"{self.name}.py"


def families() -> dict[str, Family]:
    """Every family the presets declare, by name (sorted); one ModelConfigError line for a
    preset that names its family badly or claims another family's architecture."""
    return dict(_read_families(presets_dir()))


def family_names() -> list[str]:
    return list(families())


def get_family(name: str) -> Family:
    """The family called ``name``; one ModelConfigError line listing the known ones otherwise."""
    known = families()
    if name not in known:
        raise ModelConfigError(
            f"unsupported model family {name!r}; bcgprof supports {', '.join(known)}"
        )
    return known[name]


def by_architecture() -> dict[str, str]:
    """HF architecture name -> family name, sorted by architecture."""
    return dict(sorted((arch, f.name) for f in families().values() for arch in f.architectures))


@functools.lru_cache(maxsize=4)
def _read_families(directory: Path) -> tuple[tuple[str, Family], ...]:
    """The families of the presets in ``directory`` (read once per directory)."""
    archs: dict[str, dict[str, None]] = {}  # family -> its architectures, in the order first seen
    presets: dict[str, list[str]] = {}
    owner: dict[str, str] = {}  # architecture -> family
    for path in sorted(directory.glob("*.json")):
        config = read_config(path)
        name, names = config.get("model_type"), config.get("architectures")
        if not isinstance(name, str) or not name.isidentifier():
            raise ModelConfigError(
                f"preset {path}: model_type must name the family's model file "
                f"(bcgprof/models/<model_type>.py), got {name!r}; fix the preset"
            )
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(a, str) and a for a in names)
        ):
            raise ModelConfigError(
                f"preset {path}: architectures must be a list of names such as "
                f'["LlamaForCausalLM"], got {names!r}; fix the preset'
            )
        for arch in names:
            if owner.setdefault(arch, name) != name:
                raise ModelConfigError(
                    f"preset {path}: architecture {arch} is already family {owner[arch]}'s; "
                    "one architecture belongs to one family"
                )
            archs.setdefault(name, {})[arch] = None
        presets.setdefault(name, []).append(path.stem)
    return tuple(
        (name, Family(name, tuple(archs[name]), tuple(presets[name]))) for name in sorted(archs)
    )
