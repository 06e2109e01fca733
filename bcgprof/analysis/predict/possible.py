"""What a prediction may print: no figure that cannot be, no band that leaves out its own point.

A prediction is arithmetic over measured inputs, and inputs that contradict the model behind it
(captures whose graph executables shrink as layers are added, say) can carry a figure below zero.
Such a figure is never printed: :func:`check_executables` refuses the layer extrapolation that
would make one, with its cause, and :func:`check_possible`, which every prediction passes when it
is made, refuses any mode total below zero and any band that excludes its point. A band's low end
below zero is raised to zero: memory cannot be negative, so that end says no more. Cost: a pass
over the modes' totals.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bcgprof.errors import PredictionError
from bcgprof.report_format import fmt_bytes


def check_executables(
    mode: str, counts: Sequence[int], slopes: Sequence[float], target: int, each: float
) -> None:
    """Refuse a layer prediction whose executables per later bucket, ``each`` at ``target`` layers
    (the line through ``slopes`` at ``counts``), fall below zero: graphs grow with the layers they
    hold."""
    if each >= 0:
        return
    shown = ", ".join(
        f"{s / 1024:.0f} KiB at {c} layers" for c, s in sorted(zip(counts, slopes, strict=True))
    )
    raise PredictionError(
        f"mode {mode}: each later bucket's graph executables shrink as layers are added ({shown}), "
        "which at "
        f"{target} layers would be {each / 1024:.0f} KiB, below zero; executables grow with the "
        "layers a graph "
        "holds, so these captures differ in more than their layer count or their NVML readings are "
        "too coarse: "
        "capture them again with one setup, or deeper (e.g. --num-layers 4,8)"
    )


def check_possible(modes: Sequence[Any]) -> None:
    """Every mode's totals at or above zero, its band's low end raised to zero, its point inside its
    band; a :class:`PredictionError` naming the mode and the figure otherwise."""
    for m in modes:
        for name, value in (
            ("device used", m.device_used_bytes),
            ("graph pool", m.pool_bytes),
            ("non-torch memory", m.non_torch_bytes),
        ):
            if value < 0:
                raise PredictionError(
                    f"mode {m.mode}: the prediction gives {fmt_bytes(value)} of {name}, which "
                    "cannot be: the reports contradict the model it rests on; check that they "
                    "are captures of one model and setup"
                )
        m.low_bytes = max(0, m.low_bytes)
        if not m.low_bytes <= m.device_used_bytes <= m.high_bytes:
            raise PredictionError(
                f"mode {m.mode}: the band {fmt_bytes(m.low_bytes)} to {fmt_bytes(m.high_bytes)} "
                f"leaves out its own figure, {fmt_bytes(m.device_used_bytes)}; the inputs cannot "
                "support a band: check them"
            )
