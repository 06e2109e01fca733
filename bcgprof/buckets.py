"""Bucket lists: named presets, explicit lists and ranges, validated.

A bucket spec is a comma-separated list of entries; each entry is

* an integer (``4``),
* an inclusive range ``START:STOP:STEP`` (``512:4096:512`` is 512, 1024, ..., 4096;
  ``START:STOP`` steps by 1), or
* a preset name: ``sglang-prefill`` (token counts, capped by ``max_tokens``) or
  ``sglang-decode`` (batch sizes, capped by ``max_bs``).

The result is sorted ascending; capture code orders buckets itself (largest first).
"""

from __future__ import annotations

from typing import Callable

from bcgprof.errors import BucketSpecError

DEFAULT_MAX_TOKENS = 16384
DEFAULT_MAX_BS = 256


def _steps(*runs: tuple[int, int, int]) -> list[int]:
    """Concatenate inclusive (start, stop, step) runs."""
    out: list[int] = []
    for start, stop, step in runs:
        out.extend(range(start, stop + 1, step))
    return out


def sglang_prefill_buckets(max_tokens: int = DEFAULT_MAX_TOKENS) -> list[int]:
    """SGLang's default token buckets for piecewise (breakable) prefill graphs, up to ``max_tokens``."""
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
    "sglang-prefill": ("SGLang prefill token buckets, capped by --max-tokens",
                       lambda max_tokens, max_bs: sglang_prefill_buckets(max_tokens)),
    "sglang-decode": ("SGLang decode batch sizes, capped by --max-bs",
                      lambda max_tokens, max_bs: sglang_decode_buckets(max_bs)),
}

PHASE_PRESETS = {"prefill": "sglang-prefill", "decode": "sglang-decode"}


def default_bucket_spec(phase: str) -> str:
    """The preset a phase uses when no ``--buckets`` is given."""
    try:
        return PHASE_PRESETS[phase]
    except KeyError:
        raise BucketSpecError(f"unknown phase {phase!r}; use one of {', '.join(PHASE_PRESETS)}") from None


def _positive_int(text: str, entry: str, spec: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BucketSpecError(
            f"bucket spec {spec!r}: entry {entry!r} is not an integer, a START:STOP:STEP range "
            f"or a preset ({', '.join(PRESETS)})"
        ) from None
    if value <= 0:
        raise BucketSpecError(f"bucket spec {spec!r}: entry {entry!r} must be a positive integer, got {value}")
    return value


def _expand(entry: str, spec: str, max_tokens: int, max_bs: int) -> list[int]:
    if entry.lower() in PRESETS:
        values = PRESETS[entry.lower()][1](max_tokens, max_bs)
        if not values:
            raise BucketSpecError(
                f"bucket spec {spec!r}: preset {entry!r} is empty under --max-tokens {max_tokens} / "
                f"--max-bs {max_bs}; raise the cap"
            )
        return values
    if ":" in entry:
        parts = entry.split(":")
        if len(parts) not in (2, 3):
            raise BucketSpecError(f"bucket spec {spec!r}: range {entry!r} must be START:STOP or START:STOP:STEP")
        start, stop = (_positive_int(p, entry, spec) for p in parts[:2])
        step = _positive_int(parts[2], entry, spec) if len(parts) == 3 else 1
        if stop < start:
            raise BucketSpecError(f"bucket spec {spec!r}: range {entry!r} stops ({stop}) before it starts ({start})")
        return list(range(start, stop + 1, step))
    return [_positive_int(entry, entry, spec)]


def parse_buckets(spec: str, *, max_tokens: int = DEFAULT_MAX_TOKENS, max_bs: int = DEFAULT_MAX_BS) -> list[int]:
    """A bucket spec -> the sorted list of buckets; :class:`BucketSpecError` names a bad entry.

    ``max_tokens`` and ``max_bs`` cap the presets only; explicit sizes are taken as given.
    """
    if spec is None or not str(spec).strip():
        raise BucketSpecError(f"empty bucket spec; give sizes like 4,8,16, a range 512:4096:512 "
                              f"or a preset ({', '.join(PRESETS)})")
    if max_tokens <= 0 or max_bs <= 0:
        raise BucketSpecError(f"--max-tokens and --max-bs must be positive, got {max_tokens} and {max_bs}")
    seen: dict[int, str] = {}
    for raw in str(spec).split(","):
        entry = raw.strip()
        if not entry:
            raise BucketSpecError(f"bucket spec {spec!r} has an empty entry; remove the extra comma")
        for value in _expand(entry, spec, max_tokens, max_bs):
            if value in seen:
                raise BucketSpecError(f"bucket spec {spec!r}: bucket {value} appears twice (entries {seen[value]!r} "
                                      f"and {entry!r}); list each size once")
            seen[value] = entry
    return sorted(seen)
