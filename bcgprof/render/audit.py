"""View model of `audit`: each engine's capture-memory reserve beside what the capture measured.

The figures are made in :mod:`bcgprof.analysis.audit`; this module only lays them out: one row per
mode and estimator, every byte column in MiB (the engines' own unit), the estimators' sources and
the report's notes below the table.
"""

from __future__ import annotations

from typing import Optional

from bcgprof.analysis.audit import ESTIMATORS, MIB, Audit, audit_json
from bcgprof.render.model import WARNING, Column, Line, Sheet, View
from bcgprof.render.views import run_line


def _mib(n: Optional[int]) -> str:
    return "-" if n is None else f"{n / MIB:,.0f}"


def _signed_mib(n: Optional[int]) -> str:
    return "-" if n is None else f"{n / MIB:+,.0f}"


def _pct(p: Optional[float]) -> str:
    return "-" if p is None else f"{p:+.1f}%"


def _oom(v: Optional[bool]) -> str:
    return "-" if v is None else ("OOM" if v else "fits")


def audit_sheet(a: Audit) -> Sheet:
    multi = any(m.rank != 0 for m in a.modes)
    any_note = any(e.note for m in a.modes for e in m.estimates)
    columns = [
        Column("mode", "mode", numeric=False, key_column=True),
        *([Column("rank", "rank", key_column=True)] if multi else []),
        Column("estimator", "estimator", numeric=False, key_column=True),
        Column("estimate_bytes", "estimate MiB", _mib, key_column=True),
        Column("measured_bytes", "measured MiB", _mib, drop=2),
        Column("error_bytes", "error MiB", _signed_mib, key_column=True),
        Column("error_pct", "error", _pct, key_column=True),
        Column("needs_free_bytes", "needs free MiB", _mib, drop=1),
        Column("free_margin_bytes", "vs needs free MiB", _signed_mib, drop=1),
        Column("oom", "capture", _oom, numeric=False, key_column=True),
        Column("non_torch_bytes", "non-torch MiB", _mib, drop=3),
        Column("basis", "how (MiB)", numeric=False, wide=True),
        *([Column("note", "note", numeric=False, wide=True)] if any_note else []),
    ]
    sheet = Sheet(
        "audit",
        "each engine's reserve for this list against the capture's measured cost (MiB)",
        columns,
    )
    for m in a.modes:
        for e in m.estimates:
            sheet.rows.append(
                {
                    "mode": m.mode,
                    "rank": m.rank,
                    "estimator": e.estimator,
                    "estimate_bytes": e.estimate_bytes,
                    "measured_bytes": m.measured_bytes,
                    "error_bytes": e.error_bytes,
                    "error_pct": e.error_pct,
                    "needs_free_bytes": m.needs_free_bytes,
                    "free_margin_bytes": e.free_margin_bytes,
                    "oom": e.oom,
                    "non_torch_bytes": m.non_torch_bytes,
                    "basis": e.basis or "-",
                    "note": e.note or "-",
                }
            )
    return sheet


def audit_view(a: Audit) -> View:
    report = a.report
    head = [Line(f": {run_line(report)}", lead=str(report.path))]
    s = a.settings
    if s.mla or s.dp_attention is not None or s.deepep:
        given = [
            *(["MLA backend"] if s.mla else []),
            *([f"DP attention, dp size {s.dp_attention}"] if s.dp_attention is not None else []),
            *(["DeepEP all-to-all"] if s.deepep else []),
        ]
        head.append(Line(f"SGLang settings: {', '.join(given)}"))
    foot = [Line(n, WARNING, bullet=True) for n in a.notes]
    skipped = sorted(
        {e.note for m in a.modes for e in m.estimates if e.estimate_bytes is None and e.note}
    )
    foot += [Line(f"not reproduced: {n}", WARNING, bullet=True) for n in skipped]
    foot += [
        Line(
            "measured: device used by the capture (NVML), every bucket's together; needs free: "
            "the free memory (NVML) it needed when its first bucket's warm-up began; error: "
            "estimate - measured; capture: OOM where the estimate is below needs free, taking the "
            "reserve as all that is free when capture begins; non-torch: what NVML saw and the "
            "allocator did not (graph executables), the part SGLang's term is meant to cover",
            bullet=True,
        ),
        Line(
            "the probes' samples (vllm, tokenspeed) are the profile's own: the first bucket's "
            "need, then what each later bucket kept",
            bullet=True,
        ),
    ]
    foot += [Line(f"{e.name}: {e.source}", bullet=True) for e in ESTIMATORS]
    return View(
        head=head,
        sheets=[audit_sheet(a)],
        foot=foot,
        data=audit_json(a),
        hint="--wide: how each estimate is made",
    )
