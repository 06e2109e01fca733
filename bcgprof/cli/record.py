"""`bcgprof record`: profile another program's CUDA-graph capture from inside its processes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bcgprof.cli.output import flush_stdout, note, stdout_console
from bcgprof.cli.params import TUNING, Command
from bcgprof.cli.root import app, command

ADAPTERS_HELP = (
    "Group captures into buckets by the engine adapters' table (SGLang, vLLM, torch.compile; "
    "see docs/record.md). --no-adapters: only --bucket functions, else one row per graph."
)


@app.command(cls=Command, context_settings={"allow_interspersed_args": False})
@command
def record(
    program: list[str] = typer.Argument(
        ...,
        metavar="-- COMMAND [ARGS]...",
        show_default=False,
        help="The program to run, after --: python my_script.py, python -m "
        "sglang.launch_server ..., vllm serve ..., torchrun ...",
    ),
    out: Path = typer.Option(
        Path("reports/recorded"),
        "--out",
        "-o",
        help="Report folder to write (new or empty); valid while the program runs.",
    ),
    bucket: Optional[list[str]] = typer.Option(
        None,
        "--bucket",
        metavar="MODULE:QUALNAME:ARG",
        help="A function that captures one bucket, and the argument "
        "holding its size (arg.attr, arg[0] for the first tensor's "
        "leading dimension, a|b for the first the call has); repeatable.",
    ),
    adapters: bool = typer.Option(True, "--adapters/--no-adapters", help=ADAPTERS_HELP),
    stop_after_capture: bool = typer.Option(
        False,
        "--stop-after-capture",
        help="Stop the program (SIGINT, SIGTERM, SIGKILL) once its capture "
        "is over: no phase function running and the engine printed that it "
        "serves (SGLang, vLLM), or --idle seconds passed without a new bucket.",
    ),
    idle: float = typer.Option(
        10.0,
        "--idle",
        help="Seconds without a new bucket or phase after which "
        "--stop-after-capture stops a program that printed no serving line.",
    ),
    model: str = typer.Option(
        "",
        "--model",
        help="Name the recorded model: a preset or config.json (then "
        "compare pairs the recording with a capture of it), or "
        "any label. Default: the command's name.",
    ),
    scan_logs: bool = typer.Option(
        True,
        "--scan-logs/--no-scan-logs",
        help="Pass the program's output through bcgprof (as pipes) and keep the "
        "engines' capture-memory lines; --no-scan-logs leaves the terminal.",
    ),
    trace: bool = typer.Option(
        False,
        "--trace",
        help="Also record the allocator's history of each group's graph pool, as capture does "
        "(traces-GROUP.csv.gz), so that predict --from the report --buckets can replay it: one "
        "process (rank 0, or the first to capture) per group; groups of bucket functions only. "
        "It costs the program time and host memory while its buckets run (docs/record.md).",
    ),
    sample_interval_ms: float = typer.Option(
        5.0,
        "--sample-interval-ms",
        rich_help_panel=TUNING,
        help="NVML sampling interval for each bucket's device peak, in "
        "ms; 0 turns the sampler off.",
    ),
) -> None:
    """Profile another program's CUDA-graph capture, per bucket (needs a GPU).

    Runs COMMAND with a hook in every Python process it starts (sitecustomize on PYTHONPATH): each
    torch.cuda.CUDAGraph capture is seen, grouped into buckets by engine adapters or --bucket, and
    measured around the bucket (graph pools, torch reserved and allocated, NVML) without
    synchronising, emptying caches or allocating. show, compare, gate, plot and explain read the
    report. Exit code: the program's, or 0 when --stop-after-capture stopped it.
    """
    from bcgprof.record.session import RecordOptions
    from bcgprof.record.session import record as run_record
    from bcgprof.render import show_report
    from bcgprof.render.recorded_views import logged_figure
    from bcgprof.report import read_report
    from bcgprof.report_format import fmt_bytes

    options = RecordOptions(
        command=list(program),
        out=out,
        buckets=list(bucket or []),
        adapters=adapters,
        stop_after_capture=stop_after_capture,
        idle_s=idle,
        sample_interval_ms=sample_interval_ms,
        model=model,
        scan_logs=scan_logs,
        trace=trace,
    )
    result = run_record(options, progress=lambda text: note(f"bcgprof record: {text}"))
    note(
        f"bcgprof record: report {result.report} ({result.status}, {len(result.merged.rows)} "
        "bucket rows)"
    )
    cost = result.merged.hook_cost()
    if cost["buckets"]:
        note(
            f"bcgprof record: the hook took {cost['total_ms']:.1f} ms of the program's time over "
            f"{cost['buckets']} bucket(s), {cost['median_ms']:.2f} ms a bucket (median)"
        )
    for span in result.merged.spans_by_rank():
        if span.buckets > 1:
            note(
                f"bcgprof record: rank {span.rank}: device used "
                f"{fmt_bytes(span.total, signed=True)} from its first bucket's start "
                f"to its last's end: {fmt_bytes(span.in_rows, signed=True)} in its rows, "
                f"{fmt_bytes(span.between, signed=True)} between them "
                "(the program's work outside its captures, or another process's)"
            )
    for group, traced in result.merged.traces.items():
        note(
            f"bcgprof record: allocator trace of {group} written (traces-{group}.csv.gz)"
            if traced["written"]
            else f"bcgprof record: {traced['note']}"
        )
    if result.merged.rows:
        show_report(read_report(result.report), stdout_console(), "table", "summary")
    for figure in result.engine_lines:
        who, what = logged_figure(figure)
        note(f"bcgprof record: {who} logged {what}")
    flush_stdout()
    if result.exit_code:
        raise typer.Exit(result.exit_code if 0 < result.exit_code < 256 else 1)
