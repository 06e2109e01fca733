"""A gate's tolerance and the verdict it gives one figure: :class:`Tolerance`, :func:`judge`, and
the parsing of ``--rel-tol``, ``--abs-tol-mib`` and ``--tol METRIC=REL:ABS``.

A figure regresses when it grew by more than BOTH parts of its tolerance: more than ``rel`` of
the baseline value AND more than ``abs_bytes``. Growth exactly at the larger of the two passes
(the relative part is exact: ``35%`` of a baseline is 7/20 of it). A shrink beyond both is an
improvement. Every size in a tolerance carries its unit (``8MiB``); a relative part is a fraction
or a percentage. Pure and torch-free.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from bcgprof.errors import BcgprofError
from bcgprof.report_format import MIB, fmt_bytes, parse_bytes, plain_number_text

TOTAL_METRICS = ("pool_bytes", "device_used_bytes")
BUCKET_METRICS = ("pool_delta_bytes", "device_used_delta_bytes")
METRICS = TOTAL_METRICS + BUCKET_METRICS
DEFAULT_REL_TOL = 0.01
DEFAULT_ABS_TOL_BYTES = 16 * MIB
MAX_REL_TOL = 1e6  # a fraction: 100,000,000 %
MAX_ABS_TOL_BYTES = 2**50  # 1 PiB


PASS, REGRESSION, IMPROVEMENT = "pass", "regression", "improvement"


@dataclass(frozen=True)
class Tolerance:
    rel: float = DEFAULT_REL_TOL  # fraction of the baseline value
    abs_bytes: int = DEFAULT_ABS_TOL_BYTES

    def __post_init__(self):
        rel, abs_bytes = self.rel, self.abs_bytes
        if (
            isinstance(rel, bool)
            or not isinstance(rel, (int, float))
            or not math.isfinite(rel)
            or not 0 <= rel <= MAX_REL_TOL
        ):
            raise BcgprofError(
                f"relative tolerance {rel!r} must be a finite number from 0 to {MAX_REL_TOL:g}"
            )
        if (
            isinstance(abs_bytes, bool)
            or not isinstance(abs_bytes, int)
            or not 0 <= abs_bytes <= MAX_ABS_TOL_BYTES
        ):
            raise BcgprofError(
                f"absolute tolerance {abs_bytes!r} must be a byte count from 0 to "
                f"{MAX_ABS_TOL_BYTES}"
            )

    def limit(self, baseline: int) -> int:
        """The largest growth in bytes that still passes: both tolerances must be exceeded to fail.
        The relative part is exact (``35%`` of a baseline is 7/20 of it, not 0.35's binary
        approximation), so growth exactly at the tolerance passes."""
        return max(self.abs_bytes, math.floor(Fraction(repr(float(self.rel))) * abs(baseline)))

    def describe(self) -> str:
        return f"{self.rel * 100:g}% and {fmt_bytes(self.abs_bytes)}"


# ---------------------------------------------------------------- tolerances


def parse_rel(text: str, *, what: str = "relative tolerance") -> float:
    """``1%`` or ``0.01`` -> 0.01; a finite number from 0 up."""
    raw = str(text).strip()
    shown = repr(text) if len(str(text)) <= 40 else repr(str(text)[:36] + "...")
    if not plain_number_text(raw):
        raise BcgprofError(
            f"{what} {shown} is not a number in ASCII digits (no underscores); "
            "write e.g. 0.01 or 1%"
        )
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BcgprofError(f"{what} {shown} is not a number; write e.g. 0.01 or 1%") from None
    if not math.isfinite(value):
        raise BcgprofError(f"{what} {shown} is not a finite number; write e.g. 0.01 or 1%")
    if value < 0:
        raise BcgprofError(f"{what} {shown} is negative; tolerances are >= 0")
    if value > MAX_REL_TOL:
        raise BcgprofError(f"{what} {shown} is over {MAX_REL_TOL:g}; write e.g. 0.01 or 1%")
    if raw.endswith(
        "%"
    ):  # the nearest float to the decimal written (33.333% -> 0.33333, not 0.33332999...)
        with contextlib.suppress(
            ValueError
        ):  # a spelling float() reads and Fraction() does not: float's value
            value = float(Fraction(raw[:-1].strip()) / 100)
    return value


def parse_abs_mib(value: float, *, what: str = "--abs-tol-mib") -> int:
    """An absolute tolerance in MiB (finite, >= 0) -> bytes."""
    if not math.isfinite(value):
        raise BcgprofError(f"{what} {value} is not a finite number; write e.g. 16")
    if value < 0:
        raise BcgprofError(f"{what} {value:g} is negative; tolerances are >= 0")
    if value * MIB > MAX_ABS_TOL_BYTES:
        raise BcgprofError(
            f"{what} {value:g} is over {MAX_ABS_TOL_BYTES // MIB} MiB (1 PiB); write e.g. 16"
        )
    return round(value * MIB)


def parse_tolerance(text: str, default: Tolerance) -> tuple[str, Tolerance]:
    """``METRIC=REL:ABS`` (``pool_bytes=0.5%:8MiB``; either side may be left empty) -> (metric,
    tolerance)."""
    m = re.fullmatch(r"\s*([a-z_]+)\s*=\s*([^:]*?)\s*(?::\s*(.*?)\s*)?", text or "")
    if not m:
        raise BcgprofError(f"--tol {text!r}: write METRIC=REL:ABS, e.g. pool_bytes=0.5%:8MiB")
    metric, rel, abs_text = m.group(1), m.group(2), m.group(3)
    if metric not in METRICS:
        raise BcgprofError(
            f"--tol {text!r}: unknown metric {metric!r}; use one of {', '.join(METRICS)}"
        )
    if not rel and not abs_text:
        raise BcgprofError(
            f"--tol {text!r} sets nothing; write METRIC=REL:ABS, e.g. {metric}=0.5%:8MiB"
        )
    abs_bytes = default.abs_bytes
    if abs_text:
        abs_bytes = parse_bytes(abs_text, what=f"--tol {text!r}: absolute tolerance")
        if abs_bytes > MAX_ABS_TOL_BYTES:
            raise BcgprofError(f"--tol {text!r}: absolute tolerance is over 1 PiB; write e.g. 8MiB")
    return metric, Tolerance(
        rel=parse_rel(rel, what=f"--tol {text!r}: relative tolerance") if rel else default.rel,
        abs_bytes=abs_bytes,
    )


def parse_tolerances(texts: Sequence[str], default: Tolerance) -> dict[str, Tolerance]:
    """Every ``--tol`` (:func:`parse_tolerance`), by metric; a metric given twice is refused (which
    one was meant cannot be known), never settled by keeping the last."""
    out: dict[str, Tolerance] = {}
    given: dict[str, str] = {}
    for text in texts:
        metric, tolerance = parse_tolerance(text, default)
        if metric in given:
            raise BcgprofError(
                f"--tol sets {metric} twice ({given[metric]!r} and {text!r}); give each metric "
                "one --tol"
            )
        out[metric], given[metric] = tolerance, text
    return out


def judge(baseline: int, current: int, tol: Tolerance) -> str:
    """pass | regression | improvement for one figure."""
    return verdict_of_growth(current - baseline, tol.limit(baseline))


def verdict_of_growth(delta: int, limit: int) -> str:
    """pass | regression | improvement for a growth of ``delta`` bytes against ``limit``
    (:meth:`Tolerance.limit`)."""
    if delta > limit:
        return REGRESSION
    if -delta > limit:
        return IMPROVEMENT
    return PASS
