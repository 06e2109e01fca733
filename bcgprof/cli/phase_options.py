"""`bcgprof capture --phase prefill,decode`: the phase list and each phase's buckets, read and
checked before torch is imported, and the captures such a run makes.

A list of several phases makes a report per phase and one of the pair: first each phase captured
alone, in processes of its own, into ``--out/phase-<phase>`` (ordinary one-phase reports), then,
in ``--out``, the pair (each mode's one process captures the phases in the order given into one
graph pool, schema 2, :mod:`bcgprof.measure.phases`). ``bcgprof show`` of the pair sets its pool
against the phases alone. SGLang captures prefill before decode. Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from bcgprof.cli.common import bucket_list
from bcgprof.errors import BcgprofError
from bcgprof.options import PHASES, CaptureOptions

PHASE_HELP = (
    "prefill: buckets are token counts; decode: batch sizes, one new token per sequence over a KV "
    "cache. A comma list (prefill,decode: SGLang's order) captures the phases in that order into "
    "one graph pool in each mode's process, as SGLang's one pool per process, and each phase alone "
    "in <out>/phase-<phase>; `bcgprof show` of <out> gives the pool of the pair against each "
    "phase alone. Bucket lists default per phase; --buckets then takes PHASE=SPEC entries joined "
    "by ';' (prefill=512,256;decode=8,4)."
)


def parse_phases(text: str) -> list[str]:
    """``--phase``: one phase, or a comma list of distinct phases in capture order."""
    phases = [p.strip() for p in text.split(",")]
    for p in phases:
        if p not in PHASES:
            raise BcgprofError(
                f"--phase {text!r}: {p!r} is not a phase; write {' or '.join(PHASES)}, or a comma "
                "list of them in capture order such as prefill,decode"
            )
    if len(set(phases)) != len(phases):
        raise BcgprofError(f"--phase {text!r} names a phase twice; list each phase once")
    return phases


def phase_bucket_specs(
    text: Optional[str], phases: list[str], max_tokens: int, max_bs: int
) -> dict[str, str]:
    """``--buckets`` of several phases: ``PHASE=SPEC`` entries joined by ``;``, each spec checked
    as the phase's list; a phase not named keeps its preset (absent from the result)."""
    if text is None:
        for p in phases:
            bucket_list(None, p, max_tokens, max_bs)
        return {}
    specs: dict[str, str] = {}
    for entry in text.split(";"):
        phase, sep, spec = entry.partition("=")
        phase = phase.strip()
        if not sep or phase not in phases:
            raise BcgprofError(
                f"--buckets {text!r}: with --phase {','.join(phases)} each entry is PHASE=SPEC, "
                f"PHASE one of {', '.join(phases)}, entries joined by ';' (such as "
                "prefill=512,256;decode=8,4)"
            )
        if phase in specs:
            raise BcgprofError(f"--buckets {text!r} gives {phase} twice; give each phase once")
        try:
            bucket_list(spec, phase, max_tokens, max_bs)
        except BcgprofError as e:
            raise BcgprofError(f"--buckets, the {phase} entry: {e}") from None
        specs[phase] = spec
    return specs


def phase_runs(opts: CaptureOptions, parent: Path) -> list[CaptureOptions]:
    """The captures of a run of several phases: each phase alone into ``parent/phase-<phase>``
    with its own list, then the pair into ``parent`` (last, so that what it shows when it ends
    sets it against the phases alone)."""
    from bcgprof.report.phased import phase_report_name

    pair = dataclasses.replace(opts, out=parent)
    alone = [
        dataclasses.replace(
            opts,
            phase=p,
            phases=[],
            phase_buckets={},
            buckets=opts.phase_buckets.get(p),
            out=parent / phase_report_name(p),
        )
        for p in opts.phases
    ]
    return [*alone, pair]
