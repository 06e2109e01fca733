"""A recording (``bcgprof record --trace``) as a profile that bucket-list predictions start from.

Mechanism. A recording's rows are groups (:class:`~bcgprof.vocab.RecordGroup`), not modes, and its
run.json bucket list is every group's together. :func:`as_profile` keeps the groups that have an
allocator trace (``traces-<group>.csv.gz``), checks what a replay of them assumes, and gives the
report with those groups' rows only and their bucket list as run.json's; a capture's report is given
back as it is. The traces themselves are then checked as a capture's are: the replay of each
group's own list must give its measured pool after every bucket
(:func:`bcgprof.analysis.predict.replay.verify_trace`).

Refused, in one line each: a recording with no trace (recorded without ``--trace``, or every group
refused, which run.json's ``extra.recorded.traces`` says why); a traced group captured in another
order than largest first (the replay models largest-first capture); traced groups with different
bucket lists (a prediction is one list). Cost: one pass over the rows, one ``stat`` per group.
Torch-free.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bcgprof.errors import PredictionError
from bcgprof.report import Report
from bcgprof.report.traces import trace_name
from bcgprof.vocab import Source


def untraced(report: Report) -> dict[str, str]:
    """A recording's groups without an allocator trace, and why (run.json's note, when the
    recording says)."""
    if report.run.source != Source.RECORD or report.path is None:
        return {}
    said = (report.run.extra.get("recorded") or {}).get("traces") or {}
    out = {}
    for group in report.modes():
        if not (Path(report.path) / trace_name(group)).exists():
            note = said.get(group, {}).get("note") if isinstance(said.get(group), dict) else ""
            out[group] = str(note or f"no trace of {group}")
    return out


def as_profile(report: Report) -> Report:
    """The recording restricted to its traced groups (module docstring); a capture's report as it
    is."""
    if report.run.source != Source.RECORD:
        return report
    missing = untraced(report)
    traced = [g for g in report.modes() if g not in missing]
    if not traced:
        why = "; ".join(list(missing.values())[:2])
        raise PredictionError(
            f"{report.path} is a recording without allocator traces ({why}); record it with "
            "--trace, with a bucket function per group, to predict other bucket lists"
        )
    sequences = report.run.extra.get("sequences") or {}
    lists = {}
    for group in traced:
        order = [int(b) for b in sequences.get(group, [])]
        if order != sorted(order, reverse=True):
            raise PredictionError(
                f"{report.path}: the program captured {group} in another order than largest "
                "first; bucket-list predictions model largest-first capture"
            )
        lists[group] = order
    if len({tuple(v) for v in lists.values()}) > 1:
        raise PredictionError(
            f"{report.path}: the traced groups {', '.join(traced)} hold different bucket lists; "
            "a prediction replays one list (record the groups in separate runs)"
        )
    rows = [r for r in report.buckets if r.mode in lists]
    run = dataclasses.replace(report.run, buckets=lists[traced[0]], modes=traced)
    return dataclasses.replace(report, run=run, buckets=rows)
