"""`bcgprof audit`: what the serving engines' own estimators would reserve for a profile's
capture, against what it measured (no GPU, no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bcgprof.cli.common import FORMAT_HELP, REPORT_HELP, WIDE_HELP
from bcgprof.cli.output import flush_stdout, stdout_console
from bcgprof.cli.root import app, command
from bcgprof.vocab import Format

# more data-parallel ranks than any deployment; a larger --sglang-dp-attention is a typing mistake
MAX_DP = 4096


@app.command()
@command
def audit(
    report: Path = typer.Argument(..., help=REPORT_HELP, show_default=False),
    mode: Optional[str] = typer.Option(
        None,
        "--mode",
        help="Audit this mode of the report only (a capture's per-bucket, shared, shared-largest "
        "or "
        "floor; a recording's group). Default: every one it holds.",
        show_default=False,
    ),
    sglang_mla: bool = typer.Option(
        False,
        "--sglang-mla",
        help="SGLang's formula as for an MLA attention backend (prefill graphs: a flat 1.5 GiB "
        "instead of 8 MiB per bucket).",
    ),
    sglang_dp_attention: Optional[int] = typer.Option(
        None,
        "--sglang-dp-attention",
        metavar="DP",
        min=1,
        max=MAX_DP,
        help=f"SGLang's formula as with DP attention over DP ranks, 1 to {MAX_DP} (decode graphs: "
        "3 MiB more per batch size and rank, 4.5 above 300).",
        show_default=False,
    ),
    sglang_deepep: bool = typer.Option(
        False,
        "--sglang-deepep",
        help="SGLang's formula as with DeepEP all-to-all (decode: 2 GiB more; breakable prefill "
        "graphs: 1 GiB more).",
    ),
    format: Format = typer.Option(Format.TABLE, "--format", "-f", help=FORMAT_HELP),
    wide: bool = typer.Option(False, "--wide", "-w", help=WIDE_HELP),
) -> None:
    """Engines' own capture-memory estimates against a profile (no GPU needed).

    For each mode of a profile: what vLLM (profile_cudagraph_memory), SGLang
    (reserve_for_graph_mb) and tokenspeed (its probe's median, and its capped revision) would
    reserve before capturing the profile's bucket list, beside the device memory the capture used
    and the free memory it needed; each estimate's error in MiB and percent, and whether it would
    have let the capture run out of memory (estimate below the free memory needed). vLLM's and
    tokenspeed's probes capture the largest buckets first: their samples are read off the
    profile's own rows.
    """
    from bcgprof.analysis.audit import SglangSettings, audit_report
    from bcgprof.render import render
    from bcgprof.render.audit import audit_view
    from bcgprof.report import read_report

    settings = SglangSettings(
        mla=sglang_mla, dp_attention=sglang_dp_attention, deepep=sglang_deepep
    )
    result = audit_report(read_report(report), mode=mode, settings=settings)
    render(audit_view(result), format.value, stdout_console(), wide=wide)
    flush_stdout()
