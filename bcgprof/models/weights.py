"""Weights for a built layer stack: seeded dummy values, or a published safetensors checkpoint.

Both fill a module that already lives on its device (``to_empty``), in place:

* ``init_dummy`` draws every parameter on the device with a generator seeded from the
  seed and the parameter's name, so the values do not depend on construction order and
  nothing is staged on the host.
* ``load_safetensors`` streams a checkpoint one tensor at a time (a blocks + scales pair
  for gpt-oss MXFP4 experts, dequantised on the module's device, or, for a module that keeps
  its experts packed, each read as stored) through the module's
  contract: ``checkpoint_shapes()``, ``ignores_checkpoint_name(name)`` and
  ``load_checkpoint_tensor(name, tensor)``. Every shape is checked from the file headers
  before any data is read, so a checkpoint that does not fit fails in seconds, with
  one line that lists all that is wrong.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import torch
from torch import nn

from bcgprof.errors import ModelConfigError
from bcgprof.models import mxfp4

if TYPE_CHECKING:
    from bcgprof.models.stack import DecoderModel

INDEX_FILE = "model.safetensors.index.json"
BLOCKS, SCALES = "_blocks", "_scales"
SHOW = 3  # names quoted per kind of problem; the rest are counted


class CheckpointError(ModelConfigError):
    """A checkpoint that cannot be read, or does not fit the model built from its config."""


# ---------------------------------------------------------------------------------------
# dummy weights


def _is_norm(name: str) -> bool:
    return name.endswith("norm.weight") or "layernorm" in name


def _param_seed(seed: int, name: str) -> int:
    # a stable 64-bit hash (not Python's salted hash()): same seed + name -> same stream
    digest = hashlib.blake2b(f"{seed}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@torch.no_grad()
def init_dummy(module: nn.Module, seed: int, *, std: float | None = None) -> None:
    """Fill every floating-point parameter of ``module`` in place with seeded values.

    Weight matrices, expert tensors and embeddings: normal(0, std), ``std`` defaulting to
    the config's ``initializer_range`` (0.02), as Hugging Face initialises them; RMSNorm
    weights: ones; biases: zeros; gpt-oss attention ``sinks``: normal(0, std); packed MXFP4
    experts (uint8 ``*_blocks`` / ``*_scales``): random bytes, and scales in
    :data:`~bcgprof.models.mxfp4.DUMMY_SCALES`. A bf16 forward through these stays finite
    at every depth.

    Each parameter draws from its own generator on its own device, seeded from ``seed``
    and its name: the result does not depend on the order parameters were built or
    visited, and is reproducible on the same device type (CPU and CUDA generators give
    different streams). Buffers (rope caches) are left alone.
    """
    if std is None:
        config = getattr(module, "config", None)
        std = float(config.get("initializer_range", 0.02)) if isinstance(config, dict) else 0.02
    for name, param in module.named_parameters():
        if param.is_meta:
            raise ValueError(
                f"{name} is on the meta device; materialise the module (to_empty) before init_dummy"
            )
        if param.dtype == torch.uint8 and name.endswith((BLOCKS, SCALES)):  # packed MXFP4 experts
            _fill_packed(param, name, seed)
            continue
        if not param.is_floating_point():
            continue
        if _is_norm(name):
            param.fill_(1.0)
        elif name.endswith("bias"):
            param.zero_()
        else:
            gen = torch.Generator(device=param.device)
            gen.manual_seed(_param_seed(seed, name))
            param.normal_(0.0, std, generator=gen)


def _fill_packed(param: torch.Tensor, name: str, seed: int) -> None:
    """MXFP4 blocks: random bytes (every FP4 code equally likely); scales: uniform in
    :data:`~bcgprof.models.mxfp4.DUMMY_SCALES`, so every value is finite and of a trained
    model's size."""
    gen = torch.Generator(device=param.device)
    gen.manual_seed(_param_seed(seed, name))
    lo, hi = (0, 255) if name.endswith(BLOCKS) else mxfp4.DUMMY_SCALES
    param.random_(lo, hi + 1, generator=gen)


# ---------------------------------------------------------------------------------------
# one layer's weights for every layer (``--weights one-layer``)


def _layer_signature(layer: nn.Module) -> tuple:
    return tuple((name, tuple(p.shape), p.dtype) for name, p in layer.named_parameters())


def share_layer_weights(module: DecoderModel) -> int:
    """Make every decoder layer use the parameters of the first layer shaped like it; returns how
    many distinct layer weight sets are left (one per layer shape: gpt-oss, Llama and Qwen3 have
    one).

    What a capture allocates depends on the shapes its kernels compute with, never on the values of
    the weights, so the graphs, segments, pool and executables are those of distinct weights; only
    the parameter bytes shrink, to one layer's (plus embedding and norm), which lets any depth fit
    one GPU. Call it on the meta module, before :func:`materialise`: a module moved with
    ``to_empty`` or ``to`` unties its shared parameters."""
    first: dict[tuple, nn.Module] = {}
    for layer in module.layers:
        ref = first.setdefault(_layer_signature(layer), layer)
        if ref is layer:
            continue
        params = dict(ref.named_parameters())
        for name, _ in list(layer.named_parameters()):
            owner_path, _, leaf = name.rpartition(".")
            owner = layer.get_submodule(owner_path) if owner_path else layer
            owner._parameters[leaf] = params[name]
    return len(first)


M = TypeVar("M", bound=nn.Module)


def materialise(module: M, device: torch.device) -> M:
    """``module.to_empty(device)`` that keeps shared parameters shared: one uninitialised tensor on
    ``device`` per distinct parameter, however many modules hold it."""
    made: dict[int, nn.Parameter] = {}
    for mod in module.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in made:
                made[id(p)] = nn.Parameter(
                    torch.empty_like(p, device=device), requires_grad=p.requires_grad
                )
            mod._parameters[name] = made[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is not None:
                mod._buffers[name] = torch.empty_like(b, device=device)
    return module


# ---------------------------------------------------------------------------------------
# parameter counts (meta modules too: only shapes and dtypes are read)


def count_parameters(module: nn.Module) -> int:
    """Number of parameter elements (shared parameters counted once)."""
    return sum(p.numel() for p in module.parameters())


def parameter_bytes(module: nn.Module) -> int:
    """Bytes the parameters take in their current dtypes."""
    return sum(p.numel() * p.element_size() for p in module.parameters())


# ---------------------------------------------------------------------------------------
# safetensors checkpoints


def _safe_open(path: Path):
    from safetensors import safe_open

    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except Exception as e:  # safetensors raises its own error type, or OSError
        raise CheckpointError(
            f"cannot read {path}: {_one_line(e)}; the file is corrupt or incomplete, re-download it"
        ) from None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def checkpoint_files(checkpoint_dir: Path) -> list[Path]:
    """The safetensors files of a checkpoint: those its index names, else every one present."""
    checkpoint_dir = Path(checkpoint_dir)
    index = checkpoint_dir / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"cannot read {index}: {_one_line(e)}; re-download it") from None
        files = [checkpoint_dir / n for n in names]
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise CheckpointError(
                f"{index} names {len(absent)} file(s) missing from {checkpoint_dir}: "
                f"{_quote(absent)}; "
                "download the whole checkpoint"
            )
        return files
    files = sorted(checkpoint_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(
            f"{checkpoint_dir} holds no *.safetensors files; download the checkpoint's weights "
            "or use dummy weights (--weights dummy)"
        )
    return files


@dataclass
class _Entry:
    """One tensor the module will receive: where it is and what it becomes."""

    name: str  # the module's name for it (X for an X_blocks + X_scales pair)
    file: Path
    shape: tuple[int, ...]  # after dequantisation
    scales_file: Path | None = None  # set for MXFP4 pairs


@dataclass
class _Problems:
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unpaired: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)

    def message(self, checkpoint_dir: Path, module: nn.Module) -> str | None:
        parts = []
        for label, names in (
            ("missing", self.missing),
            ("unexpected", self.unexpected),
            ("with a different shape (checkpoint vs model)", self.mismatched),
            ("MXFP4 blocks or scales without their pair", self.unpaired),
            ("in more than one file", self.duplicated),
        ):
            if names:
                parts.append(f"{len(names)} {label}: {_quote(names)}")
        if not parts:
            return None
        return (
            f"checkpoint {checkpoint_dir} does not fit {type(module).__name__}: "
            f"{'; '.join(parts)}; "
            "check that config.json (layers, experts, sizes) belongs to these weights"
        )


def _quote(names: list[str]) -> str:
    shown = ", ".join(names[:SHOW])
    return shown + (f" and {len(names) - SHOW} more" if len(names) > SHOW else "")


def _plan(module: DecoderModel, files: list[Path]) -> tuple[list[_Entry], _Problems]:
    """Read only the headers: what to load from where, and everything that does not fit."""
    expected = {name: tuple(shape) for name, shape in module.checkpoint_shapes().items()}
    problems = _Problems()
    where: dict[str, Path] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        with _safe_open(path) as f:
            for key in f.keys():  # noqa: SIM118  # a safetensors handle has keys() but is not iterable
                if key in where:
                    problems.duplicated.append(key)
                    continue
                where[key] = path
                shapes[key] = tuple(f.get_slice(key).get_shape())

    entries: list[_Entry] = []
    seen: set[str] = set()
    for key, path in where.items():
        stem = key.removesuffix(BLOCKS).removesuffix(SCALES)  # X for X_blocks / X_scales
        # packed experts: blocks and scales as stored
        if key.endswith((BLOCKS, SCALES)) and key in expected:
            seen.add(key)
            if shapes[key] != expected[key]:
                problems.mismatched.append(f"{key} {list(shapes[key])} vs {list(expected[key])}")
            else:
                entries.append(_Entry(key, path, shapes[key]))
            continue
        if key.endswith(SCALES) and stem + BLOCKS in where:
            continue  # read with its blocks
        if module.ignores_checkpoint_name(stem):
            continue
        name, shape, scales_file = key, shapes[key], None
        if key.endswith(SCALES) or (key.endswith(BLOCKS) and stem + SCALES not in where):
            problems.unpaired.append(key)
            continue
        if key.endswith(BLOCKS):  # an MXFP4 pair becomes one dequantised tensor
            name, scales_file = stem, where[stem + SCALES]
            try:
                shape = mxfp4.dequantized_shape(shape, shapes[stem + SCALES])
            except ValueError as e:
                problems.mismatched.append(f"{name} ({_one_line(e)})")
                continue
        if name not in expected:
            problems.unexpected.append(key)
            continue
        seen.add(name)
        if shape != expected[name]:
            problems.mismatched.append(f"{name} {list(shape)} vs {list(expected[name])}")
            continue
        entries.append(_Entry(name, path, shape, scales_file))
    problems.missing = [n for n in expected if n not in seen]
    return entries, problems


def _module_target(module: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Where and in what dtype to dequantise: the module's own floating-point parameters."""
    for p in module.parameters():
        if p.is_floating_point():
            return p.device, p.dtype
    return torch.device("cpu"), torch.bfloat16


@torch.no_grad()
def load_safetensors(module: DecoderModel, checkpoint_dir: Path) -> None:
    """Load a Hugging Face safetensors checkpoint into ``module``, one tensor at a time.

    Files come from ``model.safetensors.index.json`` when present, else every
    ``*.safetensors`` in ``checkpoint_dir``. Host memory holds one tensor at a time (or one
    MXFP4 blocks + scales pair, dequantised chunk by chunk on the module's device into
    the module's dtype; a module whose ``checkpoint_shapes`` name ``X_blocks`` and ``X_scales``
    keeps them packed and receives each as stored, uint8, never dequantised). Raises
    ``CheckpointError`` (one line) for an unreadable file, or, before any data is read, for every
    name that is missing, unexpected, of the wrong shape or unpaired.
    """
    checkpoint_dir = Path(checkpoint_dir)
    entries, problems = _plan(module, checkpoint_files(checkpoint_dir))
    message = problems.message(checkpoint_dir, module)
    if message:
        raise CheckpointError(message)

    device, dtype = _module_target(module)
    by_file: dict[Path, list[_Entry]] = {}
    for entry in entries:
        by_file.setdefault(entry.file, []).append(entry)
    for path, file_entries in by_file.items():
        with _safe_open(path) as f:
            for entry in file_entries:
                if entry.scales_file is None:
                    tensor = _read(f, entry.name, path)
                else:
                    blocks = _read(f, entry.name + BLOCKS, path)
                    scales = _read_from(entry.scales_file, entry.name + SCALES, f, path)
                    tensor = mxfp4.dequantize_mxfp4(blocks, scales, dtype=dtype, device=device)
                    del blocks, scales
                module.load_checkpoint_tensor(entry.name, tensor)
                del tensor  # before the next read: one tensor on the host at a time


def _read(f, key: str, path: Path) -> torch.Tensor:
    try:
        return f.get_tensor(key)
    except Exception as e:
        raise CheckpointError(
            f"cannot read {key} from {path}: {_one_line(e)}; the file is corrupt, re-download it"
        ) from None


def _read_from(path: Path, key: str, open_file, open_path: Path) -> torch.Tensor:
    if path == open_path:
        return _read(open_file, key, path)
    with _safe_open(path) as f:
        return _read(f, key, path)
