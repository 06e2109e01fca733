"""Floating-point dtypes bcgprof builds models in: names, aliases, sizes. Torch-free: the torch
dtype of a name is :func:`bcgprof.models.torch_dtype`, on the capture side."""

from __future__ import annotations

from bcgprof.errors import ModelConfigError

# canonical name -> bytes per element
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

# what users and config.json files write -> canonical name
ALIASES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}


def canonical(name: object) -> str:
    """``torch.bfloat16``, ``bf16``, ``BFloat16`` ... -> ``bfloat16``; ModelConfigError
    otherwise."""
    text = str(name).replace("torch.", "").strip().lower()
    if text not in ALIASES:
        raise ModelConfigError(f"unsupported dtype {name!r}; use one of {', '.join(DTYPE_BYTES)}")
    return ALIASES[text]


def dtype_bytes(name: object) -> int:
    return DTYPE_BYTES[canonical(name)]
