"""`bcgprof gate`: the CI memory-regression gate (no GPU, no torch).

The verdict is the exit code, and nothing else may change it: a stdout that is closed,
full or gone turns into a warning. An unusable ``--summary-md`` is found before any report
is read and is then the one error line (exit 2); one that fails only later is a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bcgprof.cli.common import FORMAT_HELP
from bcgprof.cli.output import (
    OutputClosed,
    StdoutError,
    flush_stdout,
    note,
    quiet_stdout,
    stdout_console,
)
from bcgprof.cli.params import renamed
from bcgprof.cli.root import app, command
from bcgprof.errors import BcgprofError
from bcgprof.outputs import append_text, resolved_output
from bcgprof.vocab import Format


@app.command(cls=renamed(options={"--per-bucket": "--each-bucket"}))
@command
def gate(
    baseline: Path = typer.Option(
        ...,
        "--baseline",
        help="The reference report directory (a complete report).",
        show_default=False,
    ),
    current: Path = typer.Option(
        ..., "--current", help="The report to check (another directory).", show_default=False
    ),
    rel_tol: str = typer.Option(
        "0.01",
        "--rel-tol",
        help="Relative tolerance, a fraction of the baseline value "
        "(0.01) or a percentage (1%); finite, >= 0.",
    ),
    abs_tol_mib: float = typer.Option(
        16.0, "--abs-tol-mib", help="Absolute tolerance, in MiB; finite, >= 0."
    ),
    tol: Optional[list[str]] = typer.Option(
        None,
        "--tol",
        metavar="METRIC=REL:ABS",
        help="Per-metric tolerance METRIC=REL:ABS, repeatable, e.g. "
        "pool_bytes=0.5%:8MiB or device_used_bytes=:32MiB (an empty side keeps "
        "the default). Metrics: pool_bytes, device_used_bytes (mode totals), "
        "pool_delta_bytes, device_used_delta_bytes (per bucket).",
        show_default=False,
    ),
    each_bucket: bool = typer.Option(
        False, "--each-bucket", help="Also check every bucket's pool and device-used deltas."
    ),
    allow_mismatch: bool = typer.Option(
        False,
        "--allow-mismatch",
        help="Compare reports of different models, GPUs, "
        "bucket lists, layers, dtypes, phases, modes or TP sizes on their common "
        "buckets instead of refusing (exit 2).",
    ),
    format: Format = typer.Option(Format.TABLE, "--format", "-f", help=FORMAT_HELP),
    summary_md: Optional[Path] = typer.Option(
        None,
        "--summary-md",
        help="Append the verdict and tables as markdown "
        'to this file (e.g. "$GITHUB_STEP_SUMMARY"), also when the input is '
        "unusable. Appended in one locked write (O_APPEND), so gates run "
        "side by side each add theirs; never into a report directory.",
        show_default=False,
    ),
) -> None:
    """The CI gate: fail when memory grew beyond tolerance (no GPU needed).

    A mode's total pool bytes or device-used bytes (and with --each-bucket each bucket's deltas)
    fail when their growth exceeds BOTH the relative and the absolute tolerance;
    growth exactly at the tolerance passes. A bucket ok in the baseline but oom/error (or missing)
    in the current report fails. Tensor-parallel reports are checked per rank. Improvements are
    reported and never fail. -f json prints the verdict, every comparison and the tolerances as
    strict JSON.

    Exit codes: 0 pass, 1 regression (offending rows printed), 2 unusable input (missing or corrupt
    files, wrong schema version, a baseline that is not complete, the same report twice, reports of
    different models, GPUs or bucket lists, nothing in common to compare, an unusable --summary-md).
    """
    from bcgprof.analysis.gate import GateInputError, GateOptions, gate_reports, same_report
    from bcgprof.analysis.tolerance import Tolerance, parse_abs_mib, parse_rel, parse_tolerances
    from bcgprof.render import gate_error_markdown, gate_markdown, gate_view, render
    from bcgprof.report import cyclic_gc_paused, read_report

    default = Tolerance(
        rel=parse_rel(rel_tol, what="--rel-tol"), abs_bytes=parse_abs_mib(abs_tol_mib)
    )
    per_metric = parse_tolerances(tol or [], default)
    options = GateOptions(
        default, per_metric, each_bucket=each_bucket, allow_mismatch=allow_mismatch
    )

    # --summary-md is checked first, before any report is read: unusable, it is the one error line
    # (nothing could be written to it); usable, a report's error goes into it and is the one line.
    summary = (
        resolved_output(summary_md, "--summary-md", append=True) if summary_md is not None else None
    )
    try:
        if same_report(baseline, current):
            raise GateInputError(
                f"--baseline and --current are the same report ({baseline}); a gate compares a "
                "new capture against a baseline: pass the new report as --current"
            )
        with cyclic_gc_paused():  # 100,000 rows a report, no cycles: twice as fast
            result = gate_reports(read_report(baseline), read_report(current), options)
    except BcgprofError as e:
        if summary is not None:
            try:
                append_text(summary, gate_error_markdown(str(e)), "--summary-md")
            except BcgprofError as late:
                # still one line: the report's error, then why the summary lacks it
                raise BcgprofError(f"{e} (the job summary does not say so: {late})") from None
        raise

    try:
        with cyclic_gc_paused():
            render(gate_view(result), format.value, stdout_console())
        flush_stdout()
    except OutputClosed:
        quiet_stdout()  # the verdict is the exit code, whether or not anyone read the tables
    except StdoutError as e:
        quiet_stdout()
        note(f"warning: {e}; the gate's verdict is its exit code ({result.exit_code})")
    if summary is not None:
        _append_or_warn(summary, gate_markdown(result))
    raise typer.Exit(result.exit_code)


def _append_or_warn(path: Path, text: str) -> None:
    """Append to --summary-md; a failure now (it was checked before) is a warning, never the exit
    code."""
    try:
        append_text(path, text, "--summary-md")
    except BcgprofError as e:
        note(f"warning: {e}")
