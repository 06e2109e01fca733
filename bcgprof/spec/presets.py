"""Where the model presets live, and how one config.json file is read.

A preset is a Hugging Face ``config.json`` that ships with bcgprof, named by its file
name: ``configs/models/<name>.json`` in a source tree, ``bcgprof/presets/models`` in an
installed copy. Reading a file either returns its JSON object or raises one
:class:`~bcgprof.errors.ModelConfigError` line naming the file and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

from bcgprof.errors import ModelConfigError
from bcgprof.inputs import Refused, open_capped_bytes


def presets_dir() -> Path:
    """configs/models of the source tree, or the copy installed beside the package."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package.parent / "configs" / "models", package / "presets" / "models"):
        if candidate.is_dir():
            return candidate
    raise ModelConfigError("bcgprof's model presets are missing; reinstall bcgprof")


def list_presets() -> list[str]:
    """The presets' names, sorted."""
    return sorted(p.stem for p in presets_dir().glob("*.json"))


# a model's config.json is a few KiB; 1 MiB is hundreds of times any real one
MAX_CONFIG_BYTES = 2**20


def read_config(path: Path) -> dict:
    """The JSON object in ``path`` (a UTF-8 BOM allowed), or one ModelConfigError line. Only a
    regular file of at most :data:`MAX_CONFIG_BYTES` is read (its size checked before a byte is), so
    parsing stays within milliseconds and a few MiB whatever the file holds."""
    try:
        with open_capped_bytes(Path(path), MAX_CONFIG_BYTES) as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except Refused as r:
        raise ModelConfigError(_refusal(path, r)) from None
    except OSError as e:
        raise ModelConfigError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:  # it grew while being read
        raise ModelConfigError(_refusal(path, Refused("too large", size=len(data))))
    try:
        config = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise ModelConfigError(
            f"{path} is not UTF-8 text (byte at offset {e.start}); fix or re-download it"
        ) from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(
            f"{path} is not valid JSON (line {e.lineno}: {e.msg}); fix or re-download it"
        ) from None
    except (ValueError, RecursionError) as e:
        # e.g. an integer of thousands of digits, or nesting too deep
        raise ModelConfigError(
            f"{path} is not usable JSON ({str(e).splitlines()[0][:100]}); fix or re-download it"
        ) from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{path} is not a config.json object")
    return config


def _refusal(path: Path, r: Refused) -> str:
    if r.reason == "missing":
        return (
            f"{path} does not exist; pass a config.json, a checkpoint directory holding one, or a "
            "preset"
        )
    if r.reason == "unreadable":
        return f"cannot read {path}: {r.detail}"
    if r.reason == "not regular":
        return (
            f"{path} is {r.detail}, not a regular file; pass a config.json, a checkpoint "
            "directory or a preset"
        )
    return (
        f"{path} is {r.size} bytes, over the cap of {MAX_CONFIG_BYTES // 2**20} MiB for a model "
        "config "
        "(a config.json is a few KiB); pass the model's config.json"
    )
