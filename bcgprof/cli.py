"""The `bcgprof` command line: one small function per command; the work is done elsewhere.

User errors (:class:`~bcgprof.errors.BcgprofError`) print one line, ``error: ...``,
on stderr and exit with the error's code (2 for bad input); never a traceback.
"""

from __future__ import annotations

import functools
import re
import shlex
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from bcgprof import __version__
from bcgprof.errors import EXIT_INTERRUPTED, BcgprofError
from bcgprof.options import DEFAULT_MODEL, MODES

app = typer.Typer(
    name="bcgprof",
    help="Profile the GPU memory of breakable CUDA-graph capture across size buckets, "
         "and compare, gate, plot and estimate from the reports it writes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)



class Format(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"
    csv = "csv"


class Section(str, Enum):
    all = "all"
    buckets = "buckets"
    summary = "summary"


class EstimateFormat(str, Enum):
    table = "table"
    json = "json"


class Phase(str, Enum):
    prefill = "prefill"
    decode = "decode"


class Weights(str, Enum):
    dummy = "dummy"
    safetensors = "safetensors"


class Verify(str, Enum):
    smallest_largest = "smallest-largest"
    all = "all"
    none = "none"


class GraphKind(str, Enum):
    breakable = "breakable"
    full = "full"


class Order(str, Enum):
    largest_first = "largest-first"
    smallest_first = "smallest-first"


def _console():
    from rich.console import Console

    # A pipe or file gets wide lines rather than wrapped table cells.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 220, soft_wrap=False)


def _fail(message: str, code: int) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _user_errors(fn):
    """Turn BcgprofError and Ctrl-C into one line and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BcgprofError as e:
            _fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", EXIT_INTERRUPTED)

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bcgprof {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the bcgprof version and exit."),
) -> None:
    """Profile the GPU memory of breakable CUDA-graph capture across size buckets.

    `capture` needs a CUDA GPU; `show`, `compare`, `gate`, `plot` and `estimate` do not.
    """


# ---------------------------------------------------------------- capture

BUCKETS_HELP = ("Bucket spec: comma list (4,8,16), inclusive range START:STOP:STEP (512:4096:512), or a preset "
                "(sglang-prefill: token counts, capped by --max-tokens, 74 buckets at 16384; sglang-decode: batch "
                "sizes, capped by --max-bs). Entries may be mixed. Default: the phase's preset.")


def _parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",")]
    for m in modes:
        if m not in MODES:
            raise BcgprofError(f"--modes {text!r}: unknown mode {m!r}; use a comma list of {', '.join(MODES)}")
    if len(set(modes)) != len(modes):
        raise BcgprofError(f"--modes {text!r} names a mode twice; list each once")
    return modes


@app.command()
@_user_errors
def capture(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m",
                              help="Model preset name, path to a config.json, or a checkpoint directory holding one."),
    weights: Weights = typer.Option(Weights.dummy, help="dummy: random weights of the right shapes (no download); "
                                                        "safetensors: load the checkpoint directory's weights."),
    num_layers: Optional[int] = typer.Option(None, "--num-layers", min=1,
                                             help="Decoder layers to build. Default: all of the model's layers."),
    phase: Phase = typer.Option(Phase.prefill, help="prefill: buckets are token counts; decode: batch sizes."),
    buckets: Optional[str] = typer.Option(None, "--buckets", "-b", help=BUCKETS_HELP),
    max_tokens: int = typer.Option(16384, min=1, help="Cap, in tokens, of the sglang-prefill preset "
                                                      "(SGLang's chunked prefill size)."),
    max_bs: int = typer.Option(256, min=1, help="Cap, in sequences, of the sglang-decode preset; decode also sizes "
                                                "its KV cache for this many sequences."),
    context_len: int = typer.Option(4096, "--context-len", min=1, help="Decode: tokens of KV cache per sequence "
                                    "(allocated once before any capture, never charged to a bucket)."),
    modes: str = typer.Option(",".join(MODES), help="Comma list of modes to run, each in a fresh process: per-bucket "
                                                     "(each bucket keeps its own output), shared (one max-size output "
                                                     "buffer outside the pool), shared-largest (the largest bucket's "
                                                     "own output, in the pool, is the shared buffer), floor (the "
                                                     "largest bucket alone)."),
    warmup: int = typer.Option(2, min=0, help="Eager warm-up runs per bucket before its capture."),
    device: str = typer.Option("cuda:0", help="CUDA device, cuda:K."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Report directory to create. "
                                                                 "Default: reports/<model>-<timestamp>."),
    verify: Verify = typer.Option(Verify.smallest_largest, help="Replay buckets with fresh inputs and compare "
                                                                "with an eager forward: the smallest and largest, "
                                                                "all, or none."),
    in_process: bool = typer.Option(False, "--in-process", help="Run all modes in this process (debugging; "
                                                                "modes then share allocator state); recorded in "
                                                                "run.json."),
    sample_interval_ms: float = typer.Option(2.0, min=0.1, help="NVML peak-sampler interval, in milliseconds."),
    tp: int = typer.Option(1, min=1, help="Tensor-parallel ranks (GPUs), one process each."),
    seed: int = typer.Option(0, help="Random seed for dummy weights and inputs."),
    graph: GraphKind = typer.Option(GraphKind.breakable, "--graph", help="breakable: each bucket's graph is split "
                                    "into segments around attention, which runs eagerly; full: one CUDA graph per "
                                    "bucket with attention captured inside it."),
    order: Order = typer.Option(Order.largest_first, "--order", help="Capture order of the buckets: largest-first "
                                "(smaller buckets reuse pool memory the larger ones freed) or smallest-first."),
    snapshot: bool = typer.Option(False, "--snapshot", help="Record the allocator's history in each mode and write "
                                  "<mode>.snapshot.pickle into the report (open it at https://pytorch.org/memory_viz)."),
) -> None:
    """Capture the model over the buckets in each mode and write a report (needs a CUDA GPU).

    With no options: gpt-oss-20b, the sglang-prefill buckets up to 16384 tokens, all three modes.
    """
    from bcgprof.buckets import default_bucket_spec, parse_buckets
    from bcgprof.models.config import resolve_model

    # Cheap checks first, so a typo fails before torch is imported or a GPU touched.
    mode_list = _parse_modes(modes)
    if not re.fullmatch(r"cuda(:\d+)?", device):
        raise BcgprofError(f"--device {device!r} is not a CUDA device; write cuda:0, cuda:1, ...")
    resolve_model(model)
    parse_buckets(buckets or default_bucket_spec(phase.value), max_tokens=max_tokens, max_bs=max_bs)

    from bcgprof.options import CaptureOptions

    opts = CaptureOptions(
        model=model, weights=weights.value, num_layers=num_layers, phase=phase.value, buckets=buckets,
        max_tokens=max_tokens, max_bs=max_bs, context_len=context_len, modes=mode_list, warmup=warmup, device=device, out=out,
        verify=verify.value, in_process=in_process, sample_interval_ms=sample_interval_ms, tp=tp, seed=seed,
        graph=graph.value, order=order.value, snapshot=snapshot, command=shlex.join(["bcgprof", *sys.argv[1:]]),
    )
    raise typer.Exit(_run_capture(opts))


def _run_capture(opts) -> int:
    """Run the capture under a progress bar, then show the report; return the exit code."""
    from rich.console import Console

    from bcgprof import runner
    from bcgprof.capture_view import CaptureProgress
    from bcgprof.render import print_report, verdict_line
    from bcgprof.report import read_report

    console = Console()
    if not console.is_terminal:  # a log file, not a screen: keep the tables' columns whole
        console = Console(width=200)
    with CaptureProgress(console) as progress:
        outcome = runner.run_capture(opts, progress.handle)
    if not outcome.reporter:  # a torchrun rank other than 0: rank 0 shows the report
        return outcome.exit_code
    report = read_report(outcome.out)
    print_report(report, console)
    line = verdict_line(report)
    if line:
        console.print(line)
    console.print(f"report: {outcome.out}")
    if outcome.exit_code:
        console.print(f"[red]capture {outcome.status}[/] ({outcome.message or 'interrupted'}); "
                      f"the finished rows are in {outcome.out}")
    return outcome.exit_code


# ---------------------------------------------------------------- reading reports

REPORT_HELP = "Report directory (holding buckets.csv, summary.csv and run.json)."
FORMAT_HELP = ("table: rich tables in MiB/GiB; markdown: the same as GitHub tables; json and csv: raw values, "
               "bytes as integers (csv: one block per section, each headed '# name').")
SECTION_HELP = "Which part to print: all, buckets (per-bucket rows) or summary (per-mode totals)."


@app.command()
@_user_errors
def show(
    report: Path = typer.Argument(..., help=REPORT_HELP, show_default=False),
    format: Format = typer.Option(Format.table, "--format", "-f", help=FORMAT_HELP),
    section: Section = typer.Option(Section.all, help=SECTION_HELP),
) -> None:
    """Print a report's tables (no GPU needed).

    A table per mode, buckets in capture order, and a summary with the savings of shared against
    per-bucket (bytes and %) and each mode's ratio to the floor, both on device-used bytes.
    """
    from bcgprof.render import show_report
    from bcgprof.report import read_report

    show_report(read_report(report), _console(), format.value, section.value)


@app.command()
@_user_errors
def compare(
    old: Path = typer.Argument(..., help="The older report directory.", show_default=False),
    new: Path = typer.Argument(..., help="The newer report directory.", show_default=False),
    format: Format = typer.Option(Format.table, "--format", "-f", help=FORMAT_HELP),
    section: Section = typer.Option(Section.all, help="all, summary (per-mode totals) or buckets (per-bucket deltas)."),
) -> None:
    """Compare two reports side by side (no GPU needed).

    Per-mode totals, then per-bucket deltas, largest device-used growth first; buckets present in
    only one report are listed as such. Exits 0 on readable reports: use gate to fail on growth.
    """
    from bcgprof.compare import compare_reports
    from bcgprof.render import show_comparison
    from bcgprof.report import read_report

    show_comparison(compare_reports(read_report(old), read_report(new)), _console(), format.value, section.value)


@app.command()
@_user_errors
def gate(
    baseline: Path = typer.Option(..., "--baseline", help="The reference report directory.", show_default=False),
    current: Path = typer.Option(..., "--current", help="The report to check.", show_default=False),
    rel_tol: str = typer.Option("0.01", "--rel-tol", help="Relative tolerance, a fraction of the baseline value "
                                                           "(0.01) or a percentage (1%)."),
    abs_tol_mib: float = typer.Option(16.0, "--abs-tol-mib", min=0, help="Absolute tolerance, in MiB."),
    tol: Optional[List[str]] = typer.Option(None, "--tol", help="Per-metric tolerance METRIC=REL:ABS, repeatable, "
                                            "e.g. pool_bytes=0.5%:8MiB or device_used_bytes=:32MiB (an empty side "
                                            "keeps the default). Metrics: pool_bytes, device_used_bytes (mode totals), "
                                            "pool_delta_bytes, device_used_delta_bytes (per bucket).",
                                            show_default=False),
    per_bucket: bool = typer.Option(False, "--per-bucket", help="Also check every bucket's pool and device-used "
                                                                "deltas."),
    allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help="Compare reports of different models, GPUs, "
                                        "bucket lists, layers, dtypes, phases, modes or TP sizes on their common "
                                        "buckets instead of refusing (exit 2)."),
    summary_md: Optional[Path] = typer.Option(None, "--summary-md", help="Append the verdict and table as markdown "
                                              "to this file (e.g. \"$GITHUB_STEP_SUMMARY\").", show_default=False),
) -> None:
    """The CI memory-regression gate: fail when memory grew beyond tolerance (no GPU needed).

    A mode's total pool bytes or device-used bytes (and with --per-bucket each bucket's deltas) fail
    when their growth exceeds BOTH the relative and the absolute tolerance;
    growth exactly at the tolerance passes. A bucket ok in the baseline but oom/error (or missing) in the
    current report fails. Tensor-parallel reports are checked per rank. Improvements are reported and
    never fail.

    Exit codes: 0 pass, 1 regression (offending rows printed), 2 unusable input (missing or corrupt
    files, wrong schema version, reports of different models, GPUs or bucket lists).
    """
    from bcgprof.gate import GateOptions, Tolerance, gate_reports, parse_rel, parse_tolerance
    from bcgprof.render import gate_error_markdown, gate_markdown, print_gate
    from bcgprof.report import read_report
    from bcgprof.report_format import MIB

    try:
        default = Tolerance(rel=parse_rel(rel_tol, what="--rel-tol"), abs_bytes=int(round(abs_tol_mib * MIB)))
        per_metric = dict(parse_tolerance(t, default) for t in tol or [])
        options = GateOptions(default, per_metric, per_bucket=per_bucket, allow_mismatch=allow_mismatch)
        result = gate_reports(read_report(baseline), read_report(current), options)
    except BcgprofError as e:
        if summary_md is not None:
            _append(summary_md, gate_error_markdown(str(e)))
        raise
    print_gate(result, _console())
    if summary_md is not None:
        _append(summary_md, gate_markdown(result))
    raise typer.Exit(result.exit_code)


def _append(path: Path, text: str) -> None:
    try:
        with open(path, "a") as f:
            f.write(text)
    except OSError as e:
        raise BcgprofError(f"cannot append to --summary-md {path}: {e.strerror}") from None


@app.command()
@_user_errors
def plot(
    report: Path = typer.Argument(..., help=REPORT_HELP, show_default=False),
    out: Path = typer.Option(..., "--out", "-o", help="Image file to write (.png; .svg and .pdf work too).",
                             show_default=False),
    rank: int = typer.Option(0, min=0, help="Tensor-parallel rank to plot."),
    dpi: int = typer.Option(120, min=30, help="Resolution of raster images, in dots per inch."),
) -> None:
    """Plot a report to an image file (no GPU needed).

    Top: cumulative capture cost (device used, solid; graph pool, dashed) against the buckets in
    capture order, one line per mode, the floor as a horizontal reference. Bottom: each bucket's
    graph-pool delta.
    """
    from bcgprof.plot import plot_report
    from bcgprof.report import read_report

    written = plot_report(read_report(report), out, rank=rank, dpi=dpi)
    typer.echo(f"wrote {written}")


@app.command()
@_user_errors
def estimate(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m",
                              help="Model preset name, path to a config.json, or a checkpoint directory holding one."),
    buckets: Optional[str] = typer.Option(None, "--buckets", "-b", help=BUCKETS_HELP),
    phase: Phase = typer.Option(Phase.prefill, help="prefill: buckets are token counts; decode: batch sizes "
                                                    "(one output row per sequence)."),
    max_tokens: int = typer.Option(16384, min=1, help="Cap, in tokens, of the sglang-prefill preset."),
    max_bs: int = typer.Option(256, min=1, help="Cap, in sequences, of the sglang-decode preset."),
    dtype: Optional[str] = typer.Option(None, help="Output dtype: bfloat16, float16 or float32. "
                                                   "Default: the model config's dtype."),
    format: EstimateFormat = typer.Option(EstimateFormat.table, "--format", "-f",
                                          help="table, or json (per-bucket bytes and both totals as integers)."),
) -> None:
    """Output-buffer arithmetic per bucket: analytic, not measured (no GPU needed).

    Each bucket's output buffer (rows x hidden size x dtype bytes) and the retained-output total in
    per-bucket mode (the sum over buckets) versus shared mode (the largest bucket's buffer).
    Intermediates and graph executables are not included; capture measures them.
    """
    import json

    from bcgprof.buckets import default_bucket_spec, parse_buckets
    from bcgprof.estimate import estimate_output_buffers
    from bcgprof.models.config import resolve_model

    spec = resolve_model(model)
    bucket_list = parse_buckets(buckets or default_bucket_spec(phase.value), max_tokens=max_tokens, max_bs=max_bs)
    result = estimate_output_buffers(spec, bucket_list, phase=phase.value, dtype=dtype)
    if format is EstimateFormat.json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        from bcgprof.render import print_estimate

        print_estimate(result, _console())


def main() -> None:
    app(prog_name="bcgprof")
