"""The `bcgprof` command line: one small function per command; the work is done elsewhere.

Exit codes (bcgprof.errors): 0 ok; 1 a regression (gate) or a failed mode (capture); 2
unusable input, a refusal before any work, or an internal error; 130 interrupted.
User errors (:class:`~bcgprof.errors.BcgprofError`) print one line, ``error: what is
wrong; what to do``, on stderr; an unexpected exception prints one line too and exits 2.
Never a traceback, unless ``--debug`` or ``BCGPROF_DEBUG=1`` asks for one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import shlex
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from bcgprof import __version__
from bcgprof.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, BcgprofError, CaptureError, one_line
from bcgprof.buckets import MAX_BUCKET_SIZE
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


class AnalysisFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"


class AdviseMode(str, Enum):
    shared_largest = "shared-largest"
    shared = "shared"
    per_bucket = "per-bucket"


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


PIPE_WIDTH = 220  # columns of tables written to a pipe or file (COLUMNS overrides it)


class OutputClosed(Exception):
    """The reader of stdout went away (``bcgprof show ... | head``)."""


def _quiet_stdout() -> None:
    """Send what is left of stdout to /dev/null, so that nothing fails at exit either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _console():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich's own handler exits 1, which means "regression"
            _quiet_stdout()
            raise OutputClosed()

    if sys.stdout.isatty():
        width = None  # the terminal's
    else:
        # A pipe or file gets wide lines rather than wrapped table cells, unless COLUMNS says otherwise.
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and 20 <= int(columns) <= 10_000 else PIPE_WIDTH
    return _Console(highlight=False, width=width, soft_wrap=False)


class _State:
    debug = False  # --debug: tracebacks for internal errors


def _debugging() -> bool:
    return _State.debug or os.environ.get("BCGPROF_DEBUG", "") not in ("", "0")


def _fail(message: str, code: int) -> None:
    typer.echo(f"error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(code)


def _user_errors(fn):
    """Every way a command can end, as one line and a documented exit code.

    BcgprofError: its message and code (2). Ctrl-C: 130. A reader that closes stdout
    early (``| head``): quietly 0 (the gate keeps its verdict). Anything else is an internal
    error: one line and exit 2 (never 0 or 1, which mean pass and regression/failure),
    with the traceback only under --debug or BCGPROF_DEBUG=1.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import click

        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BcgprofError as e:
            if _debugging():
                traceback.print_exc()
            _fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", EXIT_INTERRUPTED)
        except (OutputClosed, BrokenPipeError):
            # The reader stopped reading (| head): nothing went wrong here.
            _quiet_stdout()
            raise typer.Exit(EXIT_OK)
        except Exception as e:
            if _debugging():
                traceback.print_exc()
                raise typer.Exit(EXIT_USAGE)
            _fail(f"internal error: {one_line(e)}; re-run with --debug for the traceback and report it", EXIT_USAGE)

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bcgprof {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the bcgprof version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Print the traceback of an internal error (as does "
                                                      "BCGPROF_DEBUG=1); without it, every error is one line."),
) -> None:
    """Profile the GPU memory of breakable CUDA-graph capture across size buckets.

    `capture` needs a CUDA GPU; `show`, `compare`, `gate`, `plot` and `estimate` do not.
    Exit codes: 0 ok, 1 a regression (gate) or a failed mode (capture), 2 unusable input or
    an internal error, 130 interrupted.
    """
    _State.debug = debug


# ---------------------------------------------------------------- capture

BUCKETS_HELP = ("Bucket spec: comma list (4,8,16), inclusive range START:STOP:STEP (512:4096:512), or a preset "
                "(sglang-prefill: token counts, capped by --max-tokens, 74 buckets at 16384; sglang-decode: batch "
                "sizes, capped by --max-bs). Entries may be mixed; at most 4096 buckets of at most 1048576 each. "
                "Default: the phase's preset.")

# Phases `capture` can measure (this is the one place the CLI refuses a phase).
CAPTURE_PHASES = ("prefill", "decode")


def _parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",")]
    for m in modes:
        if m not in MODES:
            raise BcgprofError(f"--modes {text!r}: unknown mode {m!r}; use a comma list of {', '.join(MODES)}")
    if len(set(modes)) != len(modes):
        raise BcgprofError(f"--modes {text!r} names a mode twice; list each once")
    return modes


def _check_capture_phase(phase: str) -> None:
    """Refuse, before any work, a phase capture cannot measure yet (exit 2)."""
    if phase not in CAPTURE_PHASES:
        raise CaptureError(f"{phase} capture is not available yet: the layer stacks have no KV cache; "
                           f"use --phase prefill (`bcgprof estimate --phase {phase}` gives the analytic "
                           "output-buffer figures)")


def _bucket_list(buckets: Optional[str], phase: str, max_tokens: int, max_bs: int) -> list[int]:
    """The buckets to use; --buckets '' is an error, not the default preset."""
    from bcgprof.buckets import check_caps, default_bucket_spec, parse_buckets

    check_caps(max_tokens, max_bs)
    if buckets is not None and not buckets.strip():
        raise BcgprofError("--buckets is empty; give sizes like 4,8,16, a range 512:4096:512 or a preset "
                           "(sglang-prefill, sglang-decode), or leave --buckets out for the phase's preset")
    return parse_buckets(buckets if buckets is not None else default_bucket_spec(phase),
                         max_tokens=max_tokens, max_bs=max_bs)


REPORT_FILES = ("run.json", "buckets.csv", "summary.csv")


def _holds_report(directory: Path) -> bool:
    return directory.is_dir() and any((directory / name).exists() for name in REPORT_FILES)


def _check_out(out: Optional[Path]) -> None:
    """``capture --out``: a new or empty directory somewhere writable; never a file or an existing report."""
    if out is None:
        return
    if out.exists() and not out.is_dir():
        raise CaptureError(f"--out {out} is an existing file; pass a new directory for the report")
    if _holds_report(out):
        raise CaptureError(f"--out {out} already holds a report; pass a new --out directory")
    parent = out
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise CaptureError(f"--out {out} cannot be created: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CaptureError(f"--out {out} cannot be created: {parent} is not writable")


@app.command()
@_user_errors
def capture(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m",
                              help="Model preset name, path to a config.json, or a checkpoint directory holding one."),
    weights: Weights = typer.Option(Weights.dummy, help="dummy: random weights of the right shapes (no download); "
                                                        "safetensors: load the checkpoint directory's weights."),
    num_layers: Optional[str] = typer.Option(None, "--num-layers", help="Decoder layers to build, or a comma list "
                                             "(2,4): one report per count, in <out>/layers-N. Default: all of the "
                                             "model's layers."),
    phase: Phase = typer.Option(Phase.prefill, help="prefill: buckets are token counts; decode: batch sizes, "
                                                    "one new token per sequence over a KV cache."),
    buckets: Optional[str] = typer.Option(None, "--buckets", "-b", help=BUCKETS_HELP),
    max_tokens: int = typer.Option(16384, help="Cap, in tokens, of the sglang-prefill preset "
                                               "(SGLang's chunked prefill size); 1 to 1048576."),
    max_bs: int = typer.Option(256, help="Cap, in sequences, of the sglang-decode preset, and the sequences decode's "
                                         "KV cache is sized for; 1 to 1048576."),
    context_len: int = typer.Option(4096, "--context-len", help="Decode: tokens of KV cache per sequence, allocated "
                                    "once before any capture and never charged to a bucket; 1 to 1048576."),
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
    sample_interval_ms: float = typer.Option(2.0, help="NVML peak-sampler interval, in milliseconds "
                                                            "(0.1 to 60000)."),
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
    Exit codes: 0 every mode completed, 1 a mode failed (the report is partial or failed), 2 refused
    before any work (bad option, model or --out, no GPU), 130 interrupted.
    """
    from bcgprof.models.config import resolve_model

    # Every input check first, so a typo fails before torch is imported or a GPU touched.
    _check_capture_phase(phase.value)
    mode_list = _parse_modes(modes)
    if not re.fullmatch(r"cuda(:\d{1,4})?", device):
        raise BcgprofError(f"--device {device!r} is not a CUDA device; write cuda:0, cuda:1, ...")
    if not (math.isfinite(sample_interval_ms) and 0.1 <= sample_interval_ms <= 60_000):
        raise BcgprofError(f"--sample-interval-ms {sample_interval_ms} is out of range; use 0.1 to 60000")
    if not -2 ** 63 <= seed < 2 ** 64:
        raise BcgprofError("--seed is out of range; use an integer that fits in 64 bits")
    _bucket_list(buckets, phase.value, max_tokens, max_bs)
    if context_len < 1:
        raise BcgprofError(f"--context-len must be a positive number of tokens, got {context_len}")
    if context_len > MAX_BUCKET_SIZE:
        raise BcgprofError(f"--context-len {context_len} is over the cap of {MAX_BUCKET_SIZE} tokens")
    spec = resolve_model(model)
    layer_counts = _layer_counts(num_layers, spec.num_layers)
    _check_out(out)

    from bcgprof.options import CaptureOptions

    opts = CaptureOptions(
        model=model, weights=weights.value, num_layers=layer_counts[0], phase=phase.value, buckets=buckets,
        max_tokens=max_tokens, max_bs=max_bs, context_len=context_len, modes=mode_list, warmup=warmup, device=device, out=out,
        verify=verify.value, in_process=in_process, sample_interval_ms=sample_interval_ms, tp=tp, seed=seed,
        graph=graph.value, order=order.value, snapshot=snapshot, command=shlex.join(["bcgprof", *sys.argv[1:]]),
    )
    if len(layer_counts) == 1:
        raise typer.Exit(_run_capture(opts))
    # one report per layer count, each in its own directory under --out
    from bcgprof.runner import default_out

    parent = Path(out) if out is not None else default_out(spec.name)
    codes = []
    for n in layer_counts:
        codes.append(_run_capture(dataclasses.replace(opts, num_layers=n, out=parent / f"layers-{n}")))
        if codes[-1] == EXIT_INTERRUPTED:
            break
    raise typer.Exit(max(codes))


def _layer_counts(text: Optional[str], depth: int) -> list[Optional[int]]:
    """``--num-layers``: None (every layer), one count, or a comma list of distinct counts."""
    if text is None:
        return [None]
    counts = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry.isdigit() or not 1 <= int(entry) <= depth:
            raise BcgprofError(f"--num-layers {text!r}: {entry!r} is not a layer count from 1 to {depth} (the "
                               "model's depth); write one count or a comma list such as 2,4")
        if int(entry) in counts:
            raise BcgprofError(f"--num-layers {text!r} names {entry} twice; list each count once")
        counts.append(int(entry))
    return counts


def _run_capture(opts) -> int:
    """Run the capture under a progress bar, then show the report; return the exit code."""
    from bcgprof import runner
    from bcgprof.render import print_capture_result
    from bcgprof.render.progress import CaptureProgress
    from bcgprof.report import read_report

    console = _console()
    with CaptureProgress(console) as progress:
        outcome = runner.run_capture(opts, progress.handle)
    if not outcome.reporter:  # a torchrun rank other than 0: rank 0 shows the report
        return outcome.exit_code
    print_capture_result(read_report(outcome.out), console)
    if outcome.exit_code:
        console.print(f"[red]capture {outcome.status}[/] ({outcome.message or 'interrupted'}); "
                      f"the finished rows are in {outcome.out}")
    return outcome.exit_code


# ---------------------------------------------------------------- reading reports

REPORT_HELP = "Report directory (holding buckets.csv, summary.csv and run.json)."
FORMAT_HELP = ("table: rich tables in MiB/GiB; markdown: the same as GitHub tables; json and csv: raw values, "
               "bytes as integers (csv: one block per section, each headed '# name').")
SECTION_HELP = "Which part to print: all, buckets (per-bucket rows) or summary (per-mode totals)."


WIDE_HELP = ("Tables: every column (wider than 100 columns). By default tables show the key columns and "
             "as many others as the terminal fits, never cutting a number.")


@app.command()
@_user_errors
def show(
    report: Path = typer.Argument(..., help=REPORT_HELP, show_default=False),
    format: Format = typer.Option(Format.table, "--format", "-f", help=FORMAT_HELP),
    section: Section = typer.Option(Section.all, help=SECTION_HELP),
    wide: bool = typer.Option(False, "--wide", "-w", help=WIDE_HELP),
) -> None:
    """Print a report's tables (no GPU needed).

    A table per mode, buckets in capture order, and a summary with the savings of shared against
    per-bucket (bytes and %) and each mode's ratio to the floor, both on device-used bytes.
    -f csv prints the report's own files (their columns, order and values).
    """
    from bcgprof.render import show_report
    from bcgprof.report import read_report

    show_report(read_report(report), _console(), format.value, section.value, wide=wide)


@app.command()
@_user_errors
def compare(
    old: Path = typer.Argument(..., help="The older report directory.", show_default=False),
    new: Path = typer.Argument(..., help="The newer report directory.", show_default=False),
    format: Format = typer.Option(Format.table, "--format", "-f", help=FORMAT_HELP),
    section: Section = typer.Option(Section.all, help="all, summary (per-mode totals) or buckets (per-bucket deltas)."),
    wide: bool = typer.Option(False, "--wide", "-w", help=WIDE_HELP),
) -> None:
    """Compare two reports side by side (no GPU needed).

    Per-mode totals, then per-bucket deltas, largest device-used growth first; buckets present in
    only one report are listed as such. Exits 0 on readable reports: use gate to fail on growth.
    """
    from bcgprof.compare import compare_reports
    from bcgprof.render import show_comparison
    from bcgprof.report import read_report

    show_comparison(compare_reports(read_report(old), read_report(new)), _console(), format.value, section.value,
                    wide=wide)


@app.command()
@_user_errors
def gate(
    baseline: Path = typer.Option(..., "--baseline", help="The reference report directory (a complete report).",
                                  show_default=False),
    current: Path = typer.Option(..., "--current", help="The report to check (another directory).",
                                 show_default=False),
    rel_tol: str = typer.Option("0.01", "--rel-tol", help="Relative tolerance, a fraction of the baseline value "
                                                           "(0.01) or a percentage (1%); finite, >= 0."),
    abs_tol_mib: float = typer.Option(16.0, "--abs-tol-mib", help="Absolute tolerance, in MiB; finite, >= 0."),
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
    summary_md: Optional[Path] = typer.Option(None, "--summary-md", help="Append the verdict and tables as markdown "
                                              "to this file (e.g. \"$GITHUB_STEP_SUMMARY\"), also when the input is "
                                              "unusable; checked before any report is read.", show_default=False),
) -> None:
    """The CI memory-regression gate: fail when memory grew beyond tolerance (no GPU needed).

    A mode's total pool bytes or device-used bytes (and with --per-bucket each bucket's deltas) fail
    when their growth exceeds BOTH the relative and the absolute tolerance;
    growth exactly at the tolerance passes. A bucket ok in the baseline but oom/error (or missing) in the
    current report fails. Tensor-parallel reports are checked per rank. Improvements are reported and
    never fail.

    Exit codes: 0 pass, 1 regression (offending rows printed), 2 unusable input (missing or corrupt
    files, wrong schema version, a baseline that is not complete, the same report twice, reports of
    different models, GPUs or bucket lists, nothing in common to compare).
    """
    from bcgprof.gate import GateInputError, GateOptions, Tolerance, gate_reports, parse_abs_mib, parse_rel
    from bcgprof.gate import parse_tolerance, same_report
    from bcgprof.render import gate_error_markdown, gate_markdown, print_gate
    from bcgprof.report import read_report

    # The options and --summary-md first: a mistake there is found before any report is read,
    # so it never hides a report error and never turns a verdict into exit 2.
    default = Tolerance(rel=parse_rel(rel_tol, what="--rel-tol"), abs_bytes=parse_abs_mib(abs_tol_mib))
    per_metric = dict(parse_tolerance(t, default) for t in tol or [])
    options = GateOptions(default, per_metric, per_bucket=per_bucket, allow_mismatch=allow_mismatch)
    if summary_md is not None:
        _check_summary_md(summary_md, baseline, current)
    try:
        if same_report(baseline, current):
            raise GateInputError(f"--baseline and --current are the same report ({baseline}); a gate compares a "
                                 "new capture against a baseline: pass the new report as --current")
        result = gate_reports(read_report(baseline), read_report(current), options)
    except BcgprofError as e:
        if summary_md is not None:
            _append(summary_md, gate_error_markdown(str(e)))
        raise
    try:
        print_gate(result, _console())
    except (OutputClosed, BrokenPipeError):
        _quiet_stdout()  # the verdict is the exit code, whether or not anyone read the tables
    if summary_md is not None:
        _append(summary_md, gate_markdown(result))
    raise typer.Exit(result.exit_code)


def _check_summary_md(path: Path, *reports: Path) -> None:
    """--summary-md names a file we may append to, outside every report directory."""
    if path.is_dir():
        raise BcgprofError(f"--summary-md {path} is a directory; name a file (e.g. \"$GITHUB_STEP_SUMMARY\")")
    parent = path.parent
    if path.name in REPORT_FILES or _holds_report(parent) or any(
            parent.exists() and r.is_dir() and os.path.samefile(parent, r) for r in reports):
        raise BcgprofError(f"--summary-md {path} is inside a report directory; appending there would damage the "
                           "report: name a file outside it")
    if not parent.is_dir():
        raise BcgprofError(f"--summary-md {path}: directory {parent} does not exist; create it or name another file")
    if path.exists() and not path.is_file():
        raise BcgprofError(f"--summary-md {path} is not a regular file; name a file")
    if not os.access(path if path.exists() else parent, os.W_OK):
        raise BcgprofError(f"--summary-md {path} is not writable; name a file you can write")


def _append(path: Path, text: str) -> None:
    """Append to --summary-md; a failure now (checked before) is a warning, never the exit code."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        typer.echo(f"warning: cannot append to --summary-md {path}: {e.strerror or e}", err=True)


@app.command()
@_user_errors
def plot(
    report: Path = typer.Argument(..., help=REPORT_HELP, show_default=False),
    out: Path = typer.Option(..., "--out", "-o", help="Image file to write: .png, .svg, .pdf or .jpg; a name "
                             "without a suffix gets .png.", show_default=False),
    rank: int = typer.Option(0, min=0, help="Tensor-parallel rank to plot."),
    dpi: int = typer.Option(120, help="Resolution of raster images, in dots per inch (30 to 600)."),
) -> None:
    """Plot a report to an image file (no GPU needed).

    Top: cumulative capture cost (device used, solid; graph pool, dashed) against the buckets in
    capture order, one line per mode, the floor as horizontal references. Bottom: each bucket's
    graph-pool delta.
    """
    from bcgprof.plot import check_dpi, image_path, plot_report
    from bcgprof.report import read_report

    out = image_path(out)
    check_dpi(dpi)
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
    max_tokens: int = typer.Option(16384, help="Cap, in tokens, of the sglang-prefill preset; 1 to 1048576."),
    max_bs: int = typer.Option(256, help="Cap, in sequences, of the sglang-decode preset; 1 to 1048576."),
    dtype: Optional[str] = typer.Option(None, help="Output dtype: bfloat16, float16 or float32. "
                                                   "Default: the model config's dtype."),
    format: EstimateFormat = typer.Option(EstimateFormat.table, "--format", "-f",
                                          help="table, or json (per-bucket bytes and both totals as integers)."),
) -> None:
    """Output-buffer arithmetic per bucket: analytic, not measured (no GPU needed).

    Each bucket's output buffer (rows x hidden size x dtype bytes) and the retained-output total in
    per-bucket mode (the sum over buckets) versus shared mode (the largest bucket's buffer). Their
    difference is not the saving of sharing: the graph pool reuses memory, and intermediates and
    graph executables are not included; capture measures them.
    """
    from bcgprof.estimate import estimate_output_buffers
    from bcgprof.models.config import resolve_model
    from bcgprof.render import render
    from bcgprof.render.views import estimate_view

    bucket_list = _bucket_list(buckets, phase.value, max_tokens, max_bs)
    spec = resolve_model(model)
    result = estimate_output_buffers(spec, bucket_list, phase=phase.value, dtype=dtype)
    render(estimate_view(result), format.value, _console())


# ---------------------------------------------------------------- why, what if, which

ANALYSIS_FORMAT_HELP = "table, markdown, or json (bytes as integers; the documented contract)."


@app.command()
@_user_errors
def explain(
    report: Path = typer.Argument(..., help=REPORT_HELP, show_default=False),
    format: AnalysisFormat = typer.Option(AnalysisFormat.table, "--format", "-f", help=ANALYSIS_FORMAT_HELP),
    wide: bool = typer.Option(False, "--wide", "-w", help=WIDE_HELP),
) -> None:
    """Where every byte of a capture went, from the report's own measurements (no GPU needed).

    Per mode: device used split into causes that sum to it exactly (outputs kept in the pool, other
    live pool bytes, free space inside the pool, torch memory outside it, graph executables and
    other driver memory); a fit of graph-executable memory to graphs and kernel nodes; what the
    floor's pool holds at its peak, by model code site, and its allocator slack; each mode's cost in
    tokens of KV cache; and plain sentences built from those numbers. A report written before the
    ledger columns explains what it can and says what it cannot.
    """
    from bcgprof.explain import explain_report
    from bcgprof.render import render
    from bcgprof.render.analysis import explain_view
    from bcgprof.report import read_report

    render(explain_view(explain_report(read_report(report))), format.value, _console(), wide=wide)


@app.command()
@_user_errors
def predict(
    source: List[Path] = typer.Option(..., "--from", help="A profile report; give two or more at different "
                                      "--num-layers (or the directory `capture --num-layers 2,4` wrote) to "
                                      "predict another layer count, one to predict --buckets.",
                                      show_default=False),
    layers: Optional[int] = typer.Option(None, "--layers", min=1, help="Layer count to predict "
                                         "(default: the model's full depth)."),
    buckets: Optional[str] = typer.Option(None, "--buckets", "-b", help="Another bucket list, drawn from the "
                                          "profiled buckets, to predict from one profile."),
    format: AnalysisFormat = typer.Option(AnalysisFormat.table, "--format", "-f", help=ANALYSIS_FORMAT_HELP),
    rows: bool = typer.Option(False, "--rows", help="Also print every bucket's predicted row (json always has "
                              "them)."),
) -> None:
    """Predict a capture's cost without running it (no GPU needed); labelled as predicted.

    With several reports that differ only in their layer count: every mode's totals and bucket rows
    at --layers, with an error band. With one report and --buckets: each mode's cost for that bucket
    list, from a model of pool reuse checked against measurements (see the README).
    """
    from bcgprof.buckets import parse_buckets
    from bcgprof.predict import PredictionError, predict_buckets, predict_layers
    from bcgprof.render import render
    from bcgprof.render.analysis import prediction_view
    from bcgprof.report import read_report

    reports = [read_report(p) for p in _layer_reports(source)]
    if buckets is not None:
        if len(reports) != 1:
            raise PredictionError("--buckets predicts from one profile; pass a single --from")
        if layers is not None:
            raise PredictionError("predict either another layer count (several --from) or another bucket list "
                                  "(--buckets), not both at once")
        wanted = parse_buckets(buckets, max_tokens=max(reports[0].run.buckets), max_bs=max(reports[0].run.buckets))
        prediction = predict_buckets(reports[0], wanted)
    else:
        prediction = predict_layers(reports, layers)
    render(prediction_view(prediction, rows=rows), format.value, _console())


def _layer_reports(paths: List[Path]) -> List[Path]:
    """Each path, or, for a directory that `capture --num-layers` filled, its layers-N reports."""
    out = []
    for path in paths:
        found = {int(d.name[7:]): d for d in path.glob("layers-*") if d.name[7:].isdigit() and (d / "run.json").exists()}
        out.extend([found[n] for n in sorted(found)] if found and not (path / "run.json").exists() else [path])
    return out


@app.command()
@_user_errors
def advise(
    source: Path = typer.Option(..., "--from", help="A profile report of the full bucket list to choose from.",
                                show_default=False),
    budget: str = typer.Option(..., "--budget", help="Capture-memory budget, e.g. 2.5GiB or 2048MiB.",
                               show_default=False),
    lengths: Optional[Path] = typer.Option(None, "--lengths", help="CSV of observed prefill token counts (first "
                                           "column; a header row is allowed). Default: uniform over the profiled "
                                           "range.", show_default=False),
    mode: AdviseMode = typer.Option(AdviseMode.shared_largest, "--mode", help="The mode the server would run."),
    format: AnalysisFormat = typer.Option(AnalysisFormat.table, "--format", "-f", help=ANALYSIS_FORMAT_HELP),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Also plot the budget/padding trade-off to this "
                                       "image (.png, .svg, .pdf).", show_default=False),
) -> None:
    """The bucket list with the least expected padding whose predicted cost fits a budget (no GPU needed).

    Prints the list as a --buckets spec, its predicted cost and expected padding (tokens computed for
    nothing when a batch is padded to the next bucket), and the trade-off curve.
    """
    from bcgprof.advise import advise as choose
    from bcgprof.advise import read_lengths
    from bcgprof.render import render
    from bcgprof.render.analysis import advice_view
    from bcgprof.report import read_report
    from bcgprof.report_format import parse_bytes

    if out is not None:
        from bcgprof.plot import image_path

        out = image_path(out)
    limit = parse_bytes(budget, what="--budget")
    advice = choose(read_report(source), limit, mode=mode.value,
                    lengths=read_lengths(lengths) if lengths is not None else None)
    render(advice_view(advice), format.value, _console())
    if out is not None:
        from bcgprof.plot import plot_advice

        written = plot_advice(advice, out)
        if format is AnalysisFormat.table:
            typer.echo(f"wrote {written}")


def main() -> None:
    app(prog_name="bcgprof")
