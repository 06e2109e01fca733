"""`bcgprof show`, `compare` and `plot`: reading reports (no GPU, no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bcgprof.cli.common import FORMAT_HELP, REPORT_HELP, WIDE_HELP
from bcgprof.cli.output import flush_stdout, note, stdout_console
from bcgprof.cli.root import app, command
from bcgprof.vocab import Format, Section

SECTION_HELP = "Which part to print: all, buckets (one row a bucket) or summary (per-mode totals)."


@app.command()
@command
def show(
    report: Path = typer.Argument(..., help=REPORT_HELP, show_default=False),
    format: Format = typer.Option(Format.TABLE, "--format", "-f", help=FORMAT_HELP),
    section: Section = typer.Option(Section.ALL, help=SECTION_HELP),
    wide: bool = typer.Option(False, "--wide", "-w", help=WIDE_HELP),
) -> None:
    """Print a report's tables (no GPU needed).

    A table per mode, buckets in capture order, and a summary with the savings of shared against
    per-bucket (bytes and %) and each mode's ratio to the floor, both on device-used bytes.
    -f csv prints the report's own files (their columns, order and values). A report of several
    phases captured into one pool (capture --phase prefill,decode) adds, per mode, the pool of the
    pair against each phase captured alone.
    """
    from bcgprof.render import show_report
    from bcgprof.report import cyclic_gc_paused, read_report

    with cyclic_gc_paused():  # 100,000 rows, no cycles: twice as fast
        from bcgprof.analysis.phases import pools_of

        read = read_report(report, phased=True)
        phases = pools_of(read)
        show_report(read, stdout_console(), format.value, section.value, wide=wide, phases=phases)
    flush_stdout()


@app.command()
@command
def compare(
    old: Path = typer.Argument(..., help="The older report directory.", show_default=False),
    new: Path = typer.Argument(..., help="The newer report directory.", show_default=False),
    format: Format = typer.Option(Format.TABLE, "--format", "-f", help=FORMAT_HELP),
    section: Section = typer.Option(
        Section.ALL, help="all, summary (per-mode totals) or buckets (bucket deltas)."
    ),
    wide: bool = typer.Option(False, "--wide", "-w", help=WIDE_HELP),
    pair: Optional[list[str]] = typer.Option(
        None,
        "--pair",
        metavar="OLD=NEW",
        help="Compare the old report's mode OLD with the new one's NEW (a "
        "recording's group with a capture's mode: --pair "
        "prefill=per-bucket); repeatable.",
    ),
) -> None:
    """Compare two reports side by side (no GPU needed).

    Per-mode totals, then bucket deltas, largest device-used growth first; buckets present in
    only one report are listed as such. Exits 0 on readable reports: use gate to fail on growth.
    """
    from bcgprof.analysis.compare import compare_reports, paired_modes
    from bcgprof.render import show_comparison
    from bcgprof.report import cyclic_gc_paused, read_report

    with cyclic_gc_paused():  # 100,000 rows a report, no cycles: twice as fast
        old_report, new_report = read_report(old), read_report(new)
        old_report = paired_modes(old_report, new_report, list(pair or []))
        show_comparison(
            compare_reports(old_report, new_report),
            stdout_console(),
            format.value,
            section.value,
            wide=wide,
        )
    flush_stdout()


@app.command()
@command
def plot(
    report: Path = typer.Argument(..., help=REPORT_HELP, show_default=False),
    out: Path = typer.Option(
        ...,
        "--out",
        "-o",
        help="Image file to write: .png, .svg, .pdf or .jpg; a name "
        "without a suffix gets .png. Written atomically; never into a report directory, "
        "also not through a symbolic link.",
        show_default=False,
    ),
    rank: int = typer.Option(0, min=0, help="Tensor-parallel rank to plot."),
    dpi: int = typer.Option(120, help="Resolution of raster images, in dots per inch (30 to 600)."),
) -> None:
    """Plot a report to an image file (no GPU needed).

    Top: cumulative capture cost (device used, solid; graph pool, dashed) against the buckets in
    capture order, one line per mode, the floor as horizontal references. Middle: each bucket's
    graph-pool growth, per mode. Bottom (reports with the ledger columns): each mode's device
    memory split by cause, as explain names them.
    """
    from bcgprof.outputs import resolved_output
    from bcgprof.render.plot import check_dpi, image_path, plot_report
    from bcgprof.report import read_report

    out = image_path(out)
    check_dpi(dpi)
    resolved_output(out, "--out", create_parents=True)  # refused before the report is read
    written = plot_report(read_report(report), out, rank=rank, dpi=dpi)
    note(f"wrote {written}")
