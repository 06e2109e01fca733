"""Human formatting of report figures (bytes in MiB/GiB, percentages, times) and byte sizes typed by
users.

Tables show these strings; machine formats (json, csv) keep the integers.
"""

from __future__ import annotations

import re
from typing import Optional

from bcgprof.errors import BcgprofError

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

_UNITS = {
    "b": 1,
    "k": KIB,
    "kib": KIB,
    "m": MIB,
    "mib": MIB,
    "g": GIB,
    "gib": GIB,
    "t": TIB,
    "tib": TIB,
}  # no "": a size needs its unit


def fmt_bytes(n: Optional[int], *, signed: bool = False) -> str:
    """``1.23 GiB`` at or above 1 GiB, otherwise MiB (``512.0 MiB``, ``0.02 MiB``); ``-`` for
    unknown.

    ``signed`` puts ``+`` before growth, for deltas.
    """
    if n is None:
        return "-"
    sign = "-" if n < 0 else ("+" if signed and n > 0 else "")
    size = abs(n)
    if size >= GIB:
        text = f"{size / GIB:.2f} GiB"
    elif size >= 100 * MIB:
        text = f"{size / MIB:.1f} MiB"
    else:
        text = f"{size / MIB:.2f} MiB"
    return sign + text


def fmt_pct(p: Optional[float], *, signed: bool = False) -> str:
    if p is None:
        return "-"
    return f"{p:+.2f}%" if signed else f"{p:.2f}%"


def fmt_ratio(r: Optional[float]) -> str:
    return "-" if r is None else f"{r:.3f}x"


def fmt_ms(ms: Optional[float]) -> str:
    """Milliseconds below 10 s, seconds above."""
    if ms is None:
        return "-"
    return f"{ms:.1f} ms" if abs(ms) < 10_000 else f"{ms / 1000:.1f} s"


def fmt_seconds(s: Optional[float]) -> str:
    return "-" if s is None else f"{s:.2f} s"


def fmt_int(n: Optional[int]) -> str:
    return "-" if n is None else str(n)


def pct_change(old: Optional[float], new: Optional[float]) -> Optional[float]:
    """Growth of ``new`` over ``old`` in percent; None when ``old`` is 0 or unknown."""
    if old is None or new is None or old == 0:
        return None
    return 100.0 * (new - old) / abs(old)


MAX_PARSED_BYTES = 2**60  # 1 EiB: larger sizes are typing mistakes


def plain_number_text(text: str) -> bool:
    """Whether ``text`` may be read as a number: ASCII alone and no underscore. ``int()`` and
    ``float()`` also read other scripts' digits ("\u0662\u0664" is 24) and digit groups ("1_0" is
    10), which no option, lengths file or report of bcgprof's means."""
    return text.isascii() and "_" not in text


SIZE_UNITS = "B, KiB, MiB, GiB, TiB or K, M, G, T"


def parse_bytes(text: str, *, what: str = "size") -> int:
    """``16MiB``, ``1.5 GiB``, ``512k``, ``4096B`` -> bytes: the one rule for a size in every
    option. Units are binary (:data:`SIZE_UNITS`) and required: a number without one is refused
    (16 could be bytes or MiB), as is a digit that is not ASCII. At most :data:`MAX_PARSED_BYTES`;
    anything else is a one-line :class:`BcgprofError`.
    """
    shown = repr(text) if len(str(text)) <= 40 else repr(str(text)[:36] + "...")
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text or "")
    unit = m.group(2).lower() if m else ""
    if m and not unit:
        number = m.group(1)
        example = f"{number}GiB or {number}MiB" if len(number) <= 6 else "2.5GiB or 512MiB"
        raise BcgprofError(
            f"{what} {number[:40]!r} has no unit; write e.g. {example} "
            f"(units: {SIZE_UNITS}, all binary)"
        )
    if not m or unit not in _UNITS:
        raise BcgprofError(
            f"{what} {shown} is not a size; write e.g. 16MiB, 1.5GiB or 512KiB "
            f"(units: {SIZE_UNITS}, all binary)"
        )
    number = m.group(1)
    if len(number) > 30 or float(number) * _UNITS[unit] > MAX_PARSED_BYTES:
        raise BcgprofError(f"{what} {shown} is too large; write e.g. 16MiB, 1.5GiB or 512KiB")
    return round(float(number) * _UNITS[unit])
