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


def read_config(path: Path) -> dict:
    """The JSON object in ``path`` (a UTF-8 BOM allowed), or one ModelConfigError line."""
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
