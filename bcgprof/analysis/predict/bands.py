"""Prediction bands from measured residuals, and the evidence they rest on.

A bucket-list prediction replays the graph pool exactly; what it does not replay, the graph
executables (driver memory NVML reads in 2 MiB steps), is where its error lies. Its band comes
from evidence, not a formula: every committed list capture of the same configuration as a traced
profile (model, GPU, driver, torch, depth, dtype, phase, graph kind, weights and the capture's
choices: experts, MoE workspace, executables, warm-up outputs), other than the
profile's own list, predicted from that profile and compared with its measured device-used
total, mode by mode. The band is the point plus or minus the largest absolute residual (their
signs are mixed, so the evidence says how large the error is, not which way it goes), widened
by one NVML step (a total is read in 2 MiB steps), and, for a list longer than the longest held
out, grown in proportion to its buckets (the executables' error is per bucket). Where no held-out
list of the configuration exists the band says so: one NVML step per bucket either way, stated as no
evidence.

Layer predictions keep their formula band (:func:`bcgprof.analysis.predict.lists.predict_layers`);
the evidence here is its check against deeper captures (full and intermediate depths), cited in the
band's source.

The evidence ships as ``bcgprof/analysis/predict/bands.json``, generated from the committed reports
by
``benchmarks/calibrate_bands.py`` (:mod:`bcgprof.analysis.predict.calibrate`); a test regenerates it
and fails when the shipped file is stale. A band wider than :data:`MAX_WIDTH` of its value is
flagged:
the model does not explain that case, so the figure is not a result. Torch-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Optional

from bcgprof.errors import BcgprofError
from bcgprof.report import RunInfo
from bcgprof.report.schema import CAPTURE_CHOICES, CHOICE_LABELS
from bcgprof.report.write import atomic_write_text

QUANTUM = 2 << 20  # NVML reports device memory in 2 MiB steps
MAX_WIDTH = 0.02  # a band wider than this share of its value is a sign the model is wrong
MIB = 1 << 20
CALIBRATION = "bands.json"
KEY_FIELDS = (
    "config_hash",
    "gpu_name",
    "driver",
    "torch_version",
    "layers",
    "dtype",
    "phase",
    "graph",
    "weights",
    # and the capture's choices (RunInfo.capture_choices): packed experts or another MoE workspace
    # run other kernels, shared executables and freed warm-up outputs hold other memory, so their
    # lists are not evidence for one another
    *CAPTURE_CHOICES,
)
REGENERATE = "python benchmarks/calibrate_bands.py"


class CalibrationError(BcgprofError):
    """A calibration file that cannot be read (exit 2)."""


def run_key(run: RunInfo) -> dict[str, str]:
    """What a held-out list must share with the profile for its residual to count (all as text)."""
    choices = run.capture_choices()
    return {
        name: choices[name] if name in choices else str(getattr(run, name)) for name in KEY_FIELDS
    }


@dataclass(frozen=True)
class Residual:
    """One held-out list in one mode: the profile's prediction of it and what its capture
    measured."""

    report: str
    mode: str
    buckets: int
    predicted_bytes: int
    measured_bytes: int
    interpolated: int = 0  # buckets of the list the profile lacked

    @property
    def error_bytes(self) -> int:
        """Measured minus predicted device used."""
        return self.measured_bytes - self.predicted_bytes


@dataclass(frozen=True)
class ListEvidence:
    """The held-out lists of one traced profile's configuration."""

    key: dict[str, str]
    model: str
    gpu: str
    profile: str
    residuals: tuple[Residual, ...]


@dataclass(frozen=True)
class LayerCheck:
    """One mode of a layer prediction (from ``inputs``) against a deeper capture, ``full`` (the full
    depth or an intermediate one)."""

    model: str
    gpu: str
    config_hash: str
    inputs: tuple[str, ...]
    full: str
    mode: str
    layers: int
    predicted_bytes: int
    measured_bytes: int
    low_bytes: int
    high_bytes: int
    # the free memory the capture needed: predicted (layers) and measured (full depth); None where
    # unknown
    predicted_needs_free_bytes: Optional[int] = None
    measured_needs_free_bytes: Optional[int] = None

    @property
    def inside(self) -> bool:
        return self.low_bytes <= self.measured_bytes <= self.high_bytes

    @property
    def needs_free_error_bytes(self) -> Optional[int]:
        """Measured minus predicted needs-free."""
        if self.predicted_needs_free_bytes is None or self.measured_needs_free_bytes is None:
            return None
        return self.measured_needs_free_bytes - self.predicted_needs_free_bytes


@dataclass(frozen=True)
class Calibration:
    lists: tuple[ListEvidence, ...] = ()
    layers: tuple[LayerCheck, ...] = ()
    leave_one_out: dict[str, int] = field(default_factory=dict)  # {"inside": k, "of": n}
    path: str = ""


@dataclass(frozen=True)
class Band:
    """Bytes below and above a prediction's point, and a sentence saying what they come from."""

    below: int
    above: int
    source: str
    lists: int = 0  # held-out lists behind it (0: no evidence)
    max_abs_error_bytes: Optional[int] = None


# ---------------------------------------------------------------- the file


def calibration_json(cal: Calibration) -> dict[str, Any]:
    """The file's content: the evidence, and how often the band of the others held each held-out
    list."""
    return {
        "about": (
            "Residuals behind bcgprof's prediction bands, from the committed reports; regenerate "
            "with "
            f"{REGENERATE}. error = measured - predicted device used."
        ),
        "quantum_bytes": QUANTUM,
        "lists": [
            {
                "key": e.key,
                "model": e.model,
                "gpu": e.gpu,
                "profile": e.profile,
                "residuals": [{**asdict(r), "error_bytes": r.error_bytes} for r in e.residuals],
            }
            for e in cal.lists
        ],
        "layers": [{**asdict(c), "inputs": list(c.inputs), "inside": c.inside} for c in cal.layers],
        "leave_one_out": dict(cal.leave_one_out),
    }


def _choices_text(run: RunInfo) -> str:
    """The capture's choices other than the defaults, for a band's source (" (MoE workspaces
    sglang-mxfp4)"; empty with every default)."""
    moved = [
        f"{CHOICE_LABELS[name]} {value}"
        for name, value in run.capture_choices().items()
        if value != CAPTURE_CHOICES[name]
    ]
    return f" ({', '.join(moved)})" if moved else ""


def _key_value(key: Any, name: str) -> Any:
    """A key field of a calibration file (a capture choice it predates reads as the default)."""
    if name in CAPTURE_CHOICES and name not in key:
        return CAPTURE_CHOICES[name]
    return key[name]


def parse_calibration(data: Any, path: str = "") -> Calibration:
    """A :class:`Calibration` from :func:`calibration_json`'s content; refuses a malformed one."""
    try:
        lists = tuple(
            ListEvidence(
                # a file written before a capture choice was keyed holds that choice's default
                key={k: str(_key_value(e["key"], k)) for k in KEY_FIELDS},
                model=str(e["model"]),
                gpu=str(e["gpu"]),
                profile=str(e["profile"]),
                residuals=tuple(
                    Residual(
                        str(r["report"]),
                        str(r["mode"]),
                        int(r["buckets"]),
                        int(r["predicted_bytes"]),
                        int(r["measured_bytes"]),
                        int(r.get("interpolated", 0)),
                    )
                    for r in e["residuals"]
                ),
            )
            for e in data["lists"]
        )
        layers = tuple(
            LayerCheck(
                model=str(c["model"]),
                gpu=str(c["gpu"]),
                config_hash=str(c["config_hash"]),
                inputs=tuple(str(i) for i in c["inputs"]),
                full=str(c["full"]),
                mode=str(c["mode"]),
                layers=int(c["layers"]),
                predicted_bytes=int(c["predicted_bytes"]),
                measured_bytes=int(c["measured_bytes"]),
                low_bytes=int(c["low_bytes"]),
                high_bytes=int(c["high_bytes"]),
                predicted_needs_free_bytes=_optional_int(c.get("predicted_needs_free_bytes")),
                measured_needs_free_bytes=_optional_int(c.get("measured_needs_free_bytes")),
            )
            for c in data["layers"]
        )
        loo = {str(k): int(v) for k, v in data.get("leave_one_out", {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CalibrationError(
            f"{path or 'the calibration'} is malformed ({e!r}); regenerate it with {REGENERATE}"
        ) from None
    return Calibration(lists, layers, loo, path)


def _optional_int(v: Any) -> Optional[int]:
    return None if v is None else int(v)


def write_calibration(cal: Calibration, path: Path) -> Path:
    path = Path(path)
    # a cut-short write keeps the old
    atomic_write_text(path, json.dumps(calibration_json(cal), indent=1) + "\n")
    return path


def read_calibration(path: Path) -> Calibration:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise CalibrationError(
            f"cannot read {path}: {e}; regenerate it with {REGENERATE}"
        ) from None
    return parse_calibration(data, str(path))


@lru_cache(maxsize=1)
def shipped_calibration() -> Calibration:
    """The calibration shipped with the package (no evidence when the file is absent from the
    install)."""
    resource = resources.files("bcgprof.analysis.predict").joinpath(CALIBRATION)
    if not resource.is_file():
        return Calibration()
    try:
        data = json.loads(resource.read_text())
    except ValueError as e:
        raise CalibrationError(
            f"bcgprof/analysis/{CALIBRATION} is not JSON ({e}); reinstall bcgprof"
        ) from None
    return parse_calibration(data, f"bcgprof/analysis/{CALIBRATION}")


# ---------------------------------------------------------------- list bands


class ListBands:
    """The bands of one profile's list predictions in one mode, from the calibration's residuals."""

    def __init__(
        self,
        run: RunInfo,
        mode: str,
        calibration: Optional[Calibration] = None,
        profile: str = "",
        exclude: Sequence[str] = (),
    ):
        """``exclude``: reports whose residuals are left out (leave-one-out checks)."""
        cal = shipped_calibration() if calibration is None else calibration
        key = run_key(run)
        groups = [e for e in cal.lists if e.key == key]
        self.run, self.mode, self.profile = run, mode, profile
        mine = [
            r for e in groups for r in e.residuals if r.mode == mode and r.report not in exclude
        ]
        # lists drawn from their profile's buckets
        self.residuals = [r for r in mine if not r.interpolated]
        # lists with buckets their profile lacked
        self.interpolated = [r for r in mine if r.interpolated]
        self.profiles = sorted({e.profile for e in groups})

    def band(self, buckets: int, interpolated: int = 0) -> Band:
        """The band of a ``buckets``-bucket list's device-used total; ``interpolated``: how many of
        its buckets the profile lacks (their executables are their neighbours', so lists like it are
        the evidence too)."""
        # the mode: the band's own row
        what = f"{self.run.model}{_choices_text(self.run)} on {self.run.gpu_name or 'its GPU'}"
        if not self.residuals:
            step = buckets * QUANTUM
            return Band(
                step,
                step,
                f"graph executables: no held-out lists of {what} (torch "
                f"{self.run.torch_version or '?'}, driver {self.run.driver or '?'}): one NVML "
                "step (2 MiB) per bucket either way, a guess, not evidence",
            )
        residuals = self.residuals + self.interpolated if interpolated else self.residuals
        errors = [r.error_bytes for r in residuals]
        longest = max(r.buckets for r in residuals)
        scale = max(1.0, buckets / longest)
        worst = max(abs(e) for e in errors)
        # The residuals' signs are mixed: the evidence gives the error's size, not its direction.
        half = math.ceil(worst * scale) + QUANTUM
        text = (
            f"graph executables: from {len(errors)} held-out list(s) of {what} (measured minus "
            "predicted "
            f"{min(errors) / MIB:+.1f} to {max(errors) / MIB:+.1f} MiB): the largest |error|, "
            f"{worst / MIB:.1f} MiB, plus one NVML step (2 MiB) either way"
        )
        if scale > 1:
            text += (
                f", grown x{scale:.2f} for a list longer than the longest held out ({longest} "
                "buckets)"
            )
        others = [p for p in self.profiles if p != self.profile]
        if self.profile and others and self.profile not in self.profiles:
            text += f"; the residuals were predicted from {', '.join(others)}"
        if interpolated:
            text += (
                f"; {len(self.interpolated)} of those lists had buckets their profile lacked"
                if self.interpolated
                else "; no measured list of this configuration had buckets its profile lacked, so "
                "the "
                "interpolated buckets' executables are unchecked here"
            )
        return Band(half, half, text, len(errors), worst)


def too_wide(low: int, high: int, value: int) -> bool:
    """Whether the band ``[low, high]`` is wider than :data:`MAX_WIDTH` of ``value``."""
    return high - low > MAX_WIDTH * abs(value)


TOO_WIDE = f"wider than {MAX_WIDTH:.0%} of its value, so the figure is not a result"


@dataclass(frozen=True)
class LooCheck:
    """One held-out list, and the band the other held-out lists give it."""

    profile: str
    residual: Residual
    band: Band

    @property
    def inside(self) -> bool:
        return -self.band.below <= self.residual.error_bytes <= self.band.above


def leave_one_out(cal: Calibration, runs: dict[str, RunInfo]) -> list[LooCheck]:
    """For every held-out list and mode, the band derived from the other lists (``runs``: each
    profile's run)."""
    out = []
    for e in cal.lists:
        others = Calibration(lists=(e,))
        for r in e.residuals:
            if r.interpolated:
                # evidence for interpolated lists only; the check is of the bands of lists drawn
                # from profiles
                continue
            band = ListBands(runs[e.profile], r.mode, others, e.profile, exclude=[r.report]).band(
                r.buckets
            )
            out.append(LooCheck(e.profile, r, band))
    return out


# ---------------------------------------------------------------- layer bands

LAYER_FORMULA = (
    "twice the propagated error of the NVML staircase slopes, plus two NVML steps (a formula)"
)


def layer_band_source(run: RunInfo, calibration: Optional[Calibration] = None) -> str:
    """What a layer prediction's band is, and how it fared against the committed deeper captures."""
    cal = shipped_calibration() if calibration is None else calibration
    if not cal.layers:
        return f"{LAYER_FORMULA}; not checked against any deeper capture"
    models = sorted({c.model for c in cal.layers})
    gpus = sorted({c.gpu for c in cal.layers})
    inside = sum(c.inside for c in cal.layers)
    worst = max(
        cal.layers, key=lambda c: abs(c.predicted_bytes - c.measured_bytes) / c.measured_bytes
    )
    pct = 100.0 * (worst.predicted_bytes - worst.measured_bytes) / worst.measured_bytes
    mine = any(c.config_hash == run.config_hash and c.gpu == run.gpu_name for c in cal.layers)
    return (
        f"{LAYER_FORMULA}; checked against deeper captures (full and intermediate depths) of "
        f"{', '.join(models)} on {', '.join(gpus)}: "
        f"{inside} of {len(cal.layers)} mode totals inside their band, largest error {pct:+.2f}% "
        f"({worst.model}, {worst.mode}); "
        f"{'this model is among them' if mine else 'this model is not among them'}"
    )


def layer_needs_free_band(calibration: Optional[Calibration] = None) -> tuple[int, str]:
    """How far a layer prediction's needs-free may be off either way, and what says so: the largest
    |measured - predicted| over the committed deeper captures' modes (full and intermediate depths),
    plus one NVML step (the residuals' signs are mixed, so the band is symmetric). With no such
    check: one NVML step, and the source says it is unchecked."""
    cal = shipped_calibration() if calibration is None else calibration
    checks = [c for c in cal.layers if c.needs_free_error_bytes is not None]
    if not checks:
        return QUANTUM, "one NVML step; not checked against any deeper capture"
    worst = max(checks, key=lambda c: abs(c.needs_free_error_bytes or 0))
    err = worst.needs_free_error_bytes or 0
    models = sorted({c.model for c in checks})
    close = sum(abs(c.needs_free_error_bytes or 0) <= 2 * QUANTUM for c in checks)
    return abs(err) + QUANTUM, (
        f"the largest |measured - predicted| over {len(checks)} mode(s) of deeper captures "
        f"(full and intermediate depths) ({', '.join(models)}), {abs(err) / MIB:.1f} MiB "
        f"({worst.model}, {worst.mode}), plus one NVML step; "
        f"{close} of them within two steps"
    )
