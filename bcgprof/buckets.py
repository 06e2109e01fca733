"""Bucket lists: named presets, explicit lists and ranges, validated.

A bucket spec is a comma-separated list of entries; each entry is

* an integer (``4``),
* an inclusive range ``START:STOP:STEP`` (``512:4096:512`` is 512, 1024, ..., 4096;
  ``START:STOP`` steps by 1), or
* a preset name: ``sglang-prefill`` (token counts, capped by ``max_tokens``) or
  ``sglang-decode`` (batch sizes, capped by ``max_bs``).

The result is sorted ascending; capture code orders buckets itself (largest first).

Caps, checked before anything is built: a bucket list holds at most
:data:`MAX_BUCKETS` buckets and a bucket is at most :data:`MAX_BUCKET_SIZE` (tokens or
sequences); ``max_tokens`` and ``max_bs`` are held to the same cap. A range is
sized before it is expanded, so a huge range is refused at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Optional

from bcgprof.errors import BucketSpecError

DEFAULT_MAX_TOKENS = 16384
DEFAULT_MAX_BS = 256
MAX_BUCKETS = 4096  # buckets in one list
MAX_BUCKET_SIZE = 1_048_576  # tokens (prefill) or sequences (decode) in one bucket


def _steps(*runs: tuple[int, int, int]) -> list[int]:
    """Concatenate inclusive (start, stop, step) runs."""
    out: list[int] = []
    for start, stop, step in runs:
        out.extend(range(start, stop + 1, step))
    return out


def sglang_prefill_buckets(max_tokens: int = DEFAULT_MAX_TOKENS) -> list[int]:
    """SGLang's default token buckets for piecewise (breakable) prefill graphs, up to
    ``max_tokens``."""
    grid = _steps((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256))
    grid.extend(range(4608, max(max_tokens, 4608) + 1, 512))
    return [b for b in grid if b <= max_tokens]


def sglang_decode_buckets(max_bs: int = DEFAULT_MAX_BS) -> list[int]:
    """SGLang's default decode CUDA-graph batch sizes, up to ``max_bs``."""
    grid = [1, 2, 4, 8, 12] + _steps((16, 256, 8), (272, 496, 16))
    grid.extend(range(512, max(max_bs, 512) + 1, 32))
    return [b for b in grid if b <= max_bs]


PRESETS: dict[str, tuple[str, Callable[[int, int], list[int]]]] = {
    # name -> (what it is, builder(max_tokens, max_bs))
    "sglang-prefill": (
        "SGLang prefill token buckets, capped by --max-tokens",
        lambda max_tokens, max_bs: sglang_prefill_buckets(max_tokens),
    ),
    "sglang-decode": (
        "SGLang decode batch sizes, capped by --max-bs",
        lambda max_tokens, max_bs: sglang_decode_buckets(max_bs),
    ),
}

PHASE_PRESETS = {"prefill": "sglang-prefill", "decode": "sglang-decode"}


def default_bucket_spec(phase: str) -> str:
    """The preset a phase uses when no ``--buckets`` is given."""
    try:
        return PHASE_PRESETS[phase]
    except KeyError:
        raise BucketSpecError(
            f"unknown phase {phase!r}; use one of {', '.join(PHASE_PRESETS)}"
        ) from None


def _show(spec: str, limit: int = 60) -> str:
    """``spec`` as quoted in messages, shortened when long."""
    text = repr(spec)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _positive_int(text: str, entry: str, spec: str) -> int:
    raw = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", raw):  # ASCII: \d and int() also take other scripts' digits
        raise BucketSpecError(
            f"bucket spec {_show(spec)}: entry {_show(entry)} is not an integer, a "
            "START:STOP:STEP range "
            f"or a preset ({', '.join(PRESETS)})"
        )
    digits = raw.lstrip("+-").lstrip("0") or "0"
    if raw.startswith("-") or digits == "0":
        raise BucketSpecError(
            f"bucket spec {_show(spec)}: entry {_show(entry)} must be a positive integer, "
            f"got {_show(raw, 30)[1:-1]}"
        )
    if len(digits) > len(str(MAX_BUCKET_SIZE)) or int(digits) > MAX_BUCKET_SIZE:
        raise BucketSpecError(
            f"bucket spec {_show(spec)}: entry {_show(entry)} is over the largest bucket, "
            f"{MAX_BUCKET_SIZE}; use smaller sizes"
        )
    return int(digits)


def check_caps(max_tokens: int, max_bs: int) -> None:
    """``--max-tokens`` and ``--max-bs`` must be positive and at most :data:`MAX_BUCKET_SIZE`."""
    for name, value, unit in (
        ("--max-tokens", max_tokens, "tokens"),
        ("--max-bs", max_bs, "sequences"),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise BucketSpecError(f"{name} must be an integer, got {value!r}")
        if value <= 0:
            raise BucketSpecError(f"{name} must be a positive number of {unit}, got {value}")
        if value > MAX_BUCKET_SIZE:
            shown = value if len(str(value)) <= 24 else f"a {len(str(value))}-digit number"
            raise BucketSpecError(
                f"{name} {shown} is over the cap of {MAX_BUCKET_SIZE} {unit}; "
                f"use at most {MAX_BUCKET_SIZE}"
            )


def _expand(entry: str, spec: str, max_tokens: int, max_bs: int) -> list[int]:
    if entry.lower() in PRESETS:
        values = PRESETS[entry.lower()][1](max_tokens, max_bs)
        if not values:
            raise BucketSpecError(
                f"bucket spec {spec!r}: preset {entry!r} is empty under --max-tokens {max_tokens} "
                "/ "
                f"--max-bs {max_bs}; raise the cap"
            )
        return values
    if ":" in entry:
        parts = entry.split(":")
        if len(parts) not in (2, 3):
            raise BucketSpecError(
                f"bucket spec {spec!r}: range {entry!r} must be START:STOP or START:STOP:STEP"
            )
        start, stop = (_positive_int(p, entry, spec) for p in parts[:2])
        step = _positive_int(parts[2], entry, spec) if len(parts) == 3 else 1
        if stop < start:
            raise BucketSpecError(
                f"bucket spec {spec!r}: range {entry!r} stops ({stop}) before it starts ({start})"
            )
        count = (stop - start) // step + 1
        if count > MAX_BUCKETS:
            raise BucketSpecError(
                f"bucket spec {_show(spec)}: range {entry!r} holds {count} buckets; a bucket list "
                f"holds at most {MAX_BUCKETS}: use a larger STEP"
            )
        return list(range(start, stop + 1, step))
    return [_positive_int(entry, entry, spec)]


def parse_buckets(
    spec: Optional[str], *, max_tokens: int = DEFAULT_MAX_TOKENS, max_bs: int = DEFAULT_MAX_BS
) -> list[int]:
    """A bucket spec -> the sorted list of buckets; :class:`BucketSpecError` names a bad entry.

    ``max_tokens`` and ``max_bs`` cap the presets only; explicit sizes are taken as given, up to
    :data:`MAX_BUCKET_SIZE`. The list holds at most :data:`MAX_BUCKETS` buckets.
    """
    if spec is None or not str(spec).strip():
        raise BucketSpecError(
            f"empty bucket spec; give sizes like 4,8,16, a range 512:4096:512 "
            f"or a preset ({', '.join(PRESETS)})"
        )
    check_caps(max_tokens, max_bs)
    seen: dict[int, str] = {}
    for raw in str(spec).split(","):
        entry = raw.strip()
        if not entry:
            raise BucketSpecError(
                f"bucket spec {_show(spec)} has an empty entry; remove the extra comma"
            )
        for value in _expand(entry, spec, max_tokens, max_bs):
            if value in seen:
                raise BucketSpecError(
                    f"bucket spec {_show(spec)}: bucket {value} appears twice (entries "
                    f"{seen[value]!r} and {entry!r}); list each size once"
                )
            seen[value] = entry
        if len(seen) > MAX_BUCKETS:
            raise BucketSpecError(
                f"bucket spec {_show(spec)} holds more than {MAX_BUCKETS} buckets; "
                f"a bucket list holds at most {MAX_BUCKETS}"
            )
    return sorted(seen)
