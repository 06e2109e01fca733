"""The lines a recorded report (``bcgprof record``) shows beside its rows, from run.json's
``extra.recorded``: what the program logged of its own capture memory, and each rank's span.

The figures are read, never recomputed: the engine's line as it printed it (free memory before
minus after, its own definition) and the span the recording's NVML readings gave. run.json may be
hand-edited or hostile, so an entry of the wrong shape is skipped, and at most :data:`MAX_LOGGED`
figures and :data:`MAX_SPANS` spans are shown.
"""

from __future__ import annotations

from bcgprof.render.model import Line
from bcgprof.report import Report
from bcgprof.report.limits import MAX_TP
from bcgprof.report_format import fmt_bytes
from bcgprof.vocab import Source

MAX_LOGGED = 8  # engine figures shown (8 workers' lines, say); the others are counted
MAX_SPANS = MAX_TP  # a span per rank


def recorded_lines(report: Report) -> list[Line]:
    """A recorded report's figures beside its rows, from run.json's ``extra.recorded``: the
    capture-memory figures the program logged (the engine's own, free memory before minus after)
    and, per rank, what the device gained from its first bucket's start to its last's end, of which
    its rows hold part. Entries of the wrong shape are skipped: run.json may come from anywhere."""
    if report.run.source != Source.RECORD:
        return []
    recorded = (report.run.extra or {}).get("recorded")
    if not isinstance(recorded, dict):
        return []
    lines = []
    logged = [
        " ".join(logged_figure(f))
        for f in _dicts(recorded.get("engine_log"))
        if isinstance(f.get("engine"), str)
        and isinstance(f.get("what"), str)
        and _is_int(f.get("bytes"))
    ]
    if logged:
        more = f", and {len(logged) - MAX_LOGGED} more" if len(logged) > MAX_LOGGED else ""
        lines.append(Line(f": {', '.join(logged[:MAX_LOGGED])}{more}", lead="the program logged"))
    for span in _dicts(recorded.get("between_buckets"))[:MAX_SPANS]:
        if not all(_is_int(span.get(k)) for k in ("span_bytes", "in_rows_bytes", "buckets")):
            continue
        if span["buckets"] > 1:
            lines.append(
                Line(
                    f"rank {span.get('rank')}: device used {_signed(span['span_bytes'])} from its "
                    f"first bucket's start to its last's end, {_signed(span['in_rows_bytes'])} "
                    "in its rows"
                )
            )
    return lines


def logged_figure(figure: dict) -> tuple[str, str]:
    """A capture-memory figure the program logged (:func:`bcgprof.record.logs.engine_figure`), as
    who logged it (engine and phase) and what (the figure, and the rank its line's prefix names)."""
    phase = f" {figure['phase']}" if isinstance(figure.get("phase"), str) else ""
    tp = f" (TP{figure['tp']})" if _is_int(figure.get("tp")) else ""
    return f"{figure['engine']}{phase}", f"{figure['what']} {figure['bytes'] / 2**30:.2f} GiB{tp}"


def _dicts(value) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _signed(n: int) -> str:
    return fmt_bytes(n, signed=True)
