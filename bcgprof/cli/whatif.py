"""`bcgprof estimate`, `explain`, `predict` and `advise`: why a capture cost what it did, and
what another would cost (no GPU, no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bcgprof.cli.common import BUCKETS_HELP, FORMAT_HELP, REPORT_HELP, WIDE_HELP, bucket_list
from bcgprof.cli.output import flush_stdout, note, stdout_console
from bcgprof.cli.params import renamed
from bcgprof.cli.root import app, command
from bcgprof.errors import BcgprofError
from bcgprof.options import DEFAULT_MODEL
from bcgprof.vocab import Format, ListMode, Phase

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> None:
    """Have this command's process keep the memory it frees for its own reuse (glibc's malloc; a
    no-op elsewhere). Reading a trace makes and drops arrays of a few MiB for each piece of its
    text; by default glibc gives such memory back to the kernel and then gets it again, zeroed page
    by page, which costs about a third of the reading. Arrays up to 32 MiB now come from the heap,
    which is not shrunk: the process's peak is unchanged, and it ends with the command (the
    children reading traces side by side inherit this)."""
    import os

    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
    except (AttributeError, ValueError, OSError):  # not glibc
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, (1 << 31) - 1)
    except (OSError, AttributeError):
        pass


MAX_PREDICT_LAYERS = 4096  # deeper than any model; a larger --num-layers is a typing mistake
# analysis.predict.layers.STEADY_LAYERS (not imported: the CLI loads analysis on use)
MIN_PREDICT_LAYERS = 4


@app.command()
@command
def estimate(
    model: str = typer.Option(
        DEFAULT_MODEL,
        "--model",
        "-m",
        help="Model preset name, path to a config.json, or a checkpoint directory holding one.",
    ),
    buckets: Optional[str] = typer.Option(None, "--buckets", "-b", help=BUCKETS_HELP),
    phase: Phase = typer.Option(
        Phase.PREFILL,
        help="prefill: buckets are token counts; decode: batch sizes "
        "(one output row per sequence).",
    ),
    max_tokens: int = typer.Option(
        16384, help="Cap, in tokens, of the sglang-prefill preset; 1 to 1048576."
    ),
    max_bs: int = typer.Option(
        256, help="Cap, in sequences, of the sglang-decode preset; 1 to 1048576."
    ),
    dtype: Optional[str] = typer.Option(
        None, help="Output dtype: bfloat16, float16 or float32. Default: the model config's dtype."
    ),
    format: Format = typer.Option(Format.TABLE, "--format", "-f", help=FORMAT_HELP),
) -> None:
    """Output buffers per bucket: analytic, not measured (no GPU needed).

    Each bucket's output buffer (rows x hidden size x dtype bytes) and the retained-output total in
    per-bucket mode (the sum over buckets) versus shared mode (the largest bucket's buffer). Their
    difference is not the saving of sharing: the graph pool reuses memory, and intermediates and
    graph executables are not included; capture measures them.
    """
    from bcgprof.analysis.estimate import estimate_output_buffers
    from bcgprof.render import render
    from bcgprof.render.views import estimate_view
    from bcgprof.spec import resolve_model

    chosen = bucket_list(buckets, phase.value, max_tokens, max_bs)
    result = estimate_output_buffers(resolve_model(model), chosen, phase=phase.value, dtype=dtype)
    render(estimate_view(result), format.value, stdout_console())
    flush_stdout()


@app.command()
@command
def explain(
    report: Path = typer.Argument(..., help=REPORT_HELP, show_default=False),
    format: Format = typer.Option(Format.TABLE, "--format", "-f", help=FORMAT_HELP),
    wide: bool = typer.Option(False, "--wide", "-w", help=WIDE_HELP),
) -> None:
    """Where every byte of a capture went, by cause (no GPU needed).

    From the report's own measurements, per mode: device used split into causes that sum to it
    exactly (outputs kept in the pool, other live pool bytes, free space inside the pool, torch
    memory outside it, graph executables and other driver memory); a fit of graph-executable
    memory to graphs and kernel nodes; what the floor's pool holds at its peak, by model code site,
    and its allocator slack; each mode's cost in tokens of KV cache; and plain sentences built from
    those numbers. A report written before the ledger columns explains what it can and says what
    it cannot.
    """
    from bcgprof.analysis.explain import explain_report
    from bcgprof.render import render
    from bcgprof.render.analysis import explain_view
    from bcgprof.report import read_report

    loaded = read_report(report)
    if not loaded.buckets:
        why = f" ({loaded.run.status}: {loaded.run.message})" if loaded.run.message else ""
        raise BcgprofError(
            f"{report} has no bucket rows to explain{why}; explain a report with rows"
        )
    render(explain_view(explain_report(loaded)), format.value, stdout_console(), wide=wide)
    flush_stdout()


@app.command(cls=renamed(options={"--layers": "--num-layers"}))
@command
def predict(
    source: list[Path] = typer.Option(
        ...,
        "--from",
        metavar="REPORT",
        help="A profile report; give two or more at different --num-layers (or the "
        "directory `capture --num-layers 2,4` wrote) to predict another layer count, "
        "one to predict --buckets.",
        show_default=False,
    ),
    num_layers: Optional[int] = typer.Option(
        None,
        "--num-layers",
        min=MIN_PREDICT_LAYERS,
        max=MAX_PREDICT_LAYERS,
        help=f"Layer count to predict, {MIN_PREDICT_LAYERS} to "
        f"{MAX_PREDICT_LAYERS} (default: the model's full depth; below "
        f"{MIN_PREDICT_LAYERS} layers the graph pool has not settled, so "
        "those counts are refused).",
    ),
    buckets: Optional[str] = typer.Option(
        None,
        "--buckets",
        "-b",
        help="Another bucket list within the "
        "profiled range, to predict from one profile (buckets between "
        "profiled ones are interpolated and labelled so).",
    ),
    format: Format = typer.Option(Format.TABLE, "--format", "-f", help=FORMAT_HELP),
    rows: bool = typer.Option(
        False, "--rows", help="Also print every bucket's predicted row (json always has them)."
    ),
    free: Optional[str] = typer.Option(
        None,
        "--free",
        metavar="SIZE",
        help="Check each mode (of --buckets, "
        "of the profile's own list, or at --num-layers) against SIZE free on the device "
        "(NVML) when the first bucket's warm-up begins, e.g. 4GiB: whether it fits, "
        "else the first bucket that runs out.",
    ),
    after: Optional[Path] = typer.Option(
        None,
        "--after",
        metavar="REPORT",
        help="A traced one-phase report of the phase captured before --from's in the same "
        "process and pool (SGLang: prefill, then decode; capture --phase prefill,decode "
        "writes both under its report as phase-<phase>): predicts the pool of the two phases "
        "in one pool, --from's list replayed into the pool this one's left.",
        show_default=False,
    ),
) -> None:
    """Predict a capture's cost without running it (no GPU needed).

    With several reports that differ only in their layer count: every mode's totals and bucket rows
    at --num-layers, with an error band. With one report and --buckets: each mode's cost for that
    bucket list (see the docs for how it is modelled and how well it holds). With --after: two
    phases captured into one pool. Labelled "predicted, not measured".
    """
    from bcgprof.analysis.predict.layers import predict_layers
    from bcgprof.analysis.predict.lists import PredictionError, predict_buckets, predict_own_list
    from bcgprof.buckets import parse_buckets
    from bcgprof.render import render
    from bcgprof.render.analysis import prediction_view
    from bcgprof.report import read_report

    keep_freed_memory()
    if after is not None:
        _predict_pair(source, after, buckets, num_layers, free, format)
        return
    reports = [read_report(p) for p in _layer_reports(source)]
    _check_layer_names(reports)
    free_bytes = _size(free, "--free") if free is not None else None
    if buckets is not None:
        if len(reports) != 1:
            held = (
                f" ({source[0]} holds {len(reports)} layer reports: name one of them)"
                if len(source) == 1
                else ""
            )
            raise PredictionError(
                f"--buckets predicts from one profile; pass a single --from report{held}"
            )
        if num_layers is not None:
            raise PredictionError(
                "predict either another layer count (several --from) or another bucket list "
                "(--buckets), not both at once"
            )
        profiled = reports[0].run.buckets
        if not profiled:
            raise PredictionError(
                f"{source[0]} lists no buckets in run.json; predict from a report that profiled "
                "some"
            )
        wanted = parse_buckets(buckets, max_tokens=max(profiled), max_bs=max(profiled))
        prediction = predict_buckets(reports[0], wanted, free=free_bytes)
    elif free_bytes is not None and len(reports) == 1 and num_layers is None:
        prediction = predict_own_list(reports[0], free_bytes)
    else:
        prediction = predict_layers(reports, num_layers, free=free_bytes)
    render(prediction_view(prediction, rows=rows), format.value, stdout_console())
    flush_stdout()


def _predict_pair(
    source: list[Path],
    after: Path,
    buckets: Optional[str],
    num_layers: Optional[int],
    free: Optional[str],
    format: Format,
) -> None:
    """`predict --from SECOND --after FIRST`: the two phases in one pool."""
    from bcgprof.analysis.predict.pair import predict_pair
    from bcgprof.errors import PredictionError
    from bcgprof.render import render
    from bcgprof.render.phase_views import pair_prediction_view
    from bcgprof.report import read_report

    if len(source) != 1 or buckets is not None or num_layers is not None or free is not None:
        raise PredictionError(
            "--after predicts two phases in one pool from one --from report and the --after "
            "report alone; leave out --buckets, --num-layers and --free, and give one --from"
        )
    prediction = predict_pair(read_report(after), read_report(source[0]))
    render(pair_prediction_view(prediction), format.value, stdout_console())
    flush_stdout()


def _layer_reports(paths: list[Path]) -> list[Path]:
    """Each path, or, for a directory that `capture --num-layers` filled, all its layers-N reports
    (one that cannot be read is then refused by the reader, not left out of the fit). Two names for
    one depth (layers-4 and layers-04) are refused: which one was meant cannot be known."""
    from itertools import pairwise

    from bcgprof.inputs import DIRECTORY, MISSING, kind_of
    from bcgprof.report.schema import RUN_FILE, layer_count_of

    out = []
    for path in paths:
        if kind_of(path / RUN_FILE)[0] != MISSING or kind_of(path)[0] != DIRECTORY:
            out.append(path)  # a report, or what reading it says is wrong
            continue
        try:
            named = sorted(
                (n, d) for d in path.iterdir() if (n := layer_count_of(d.name)) is not None
            )
        except OSError as e:
            raise BcgprofError(
                f"cannot read --from {path}: {e.strerror or e}; give a report directory you can "
                "read"
            ) from None
        for (n, a), (m, b) in pairwise(named):
            if n == m:
                raise BcgprofError(
                    f"--from {path} holds two reports for {n} layers, {a.name} and {b.name}; keep "
                    "one report per depth"
                )
        out.extend([d for _, d in named] if named else [path])
    return out


def _check_layer_names(reports: list) -> None:
    """A report named layers-N (as `capture --num-layers` names them) must record N layers in
    run.json: a name that says another depth is a renamed or misplaced report, refused rather than
    fitted."""
    from bcgprof.analysis.predict.lists import PredictionError
    from bcgprof.report.schema import layer_count_of

    for r in reports:
        named = layer_count_of(Path(r.path).name)
        if named is not None and named != r.run.layers:
            raise PredictionError(
                f"{r.path} is named for {named} layers but its run.json records {r.run.layers}; "
                "a layer report is named after its depth: rename it or capture it again"
            )


def _size(text: str, option: str = "--budget") -> int:
    """--budget, --free: a size with its unit (2.5GiB), by the one rule for sizes."""
    from bcgprof.report_format import parse_bytes

    return parse_bytes(text, what=option)


@app.command()
@command
def advise(
    source: Path = typer.Option(
        ...,
        "--from",
        help="A profile report of the full bucket list to choose from.",
        show_default=False,
    ),
    budget: str = typer.Option(
        ...,
        "--budget",
        help="Capture-memory budget with its unit, e.g. 2.5GiB or 2048MiB.",
        show_default=False,
    ),
    lengths: Optional[Path] = typer.Option(
        None,
        "--lengths",
        help="CSV of observed prefill token counts (first "
        "column; a header row is allowed). Default: uniform over the profiled "
        "range.",
        show_default=False,
    ),
    mode: ListMode = typer.Option(
        ListMode.SHARED_LARGEST,
        "--mode",
        help="The mode the server would run "
        "(the floor captures one bucket, so it has no list to advise).",
    ),
    free: Optional[str] = typer.Option(
        None,
        "--free",
        metavar="SIZE",
        help="Also require that the list "
        "captures with SIZE free on the device (NVML) when its first bucket's "
        "warm-up begins, e.g. 5GiB (a capture needs more free than it keeps: the "
        "warm-ups' cached blocks and the pool's growth meet at each bucket's peak).",
        show_default=False,
    ),
    format: Format = typer.Option(Format.TABLE, "--format", "-f", help=FORMAT_HELP),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        "-o",
        help="Also plot the budget/padding trade-off to this "
        "image (.png, .svg, .pdf), written atomically.",
        show_default=False,
    ),
) -> None:
    """The least-padding bucket list that fits a budget (no GPU needed).

    The bucket list with the least expected padding whose predicted cost fits the budget (and,
    with --free, that captures with that much free). Prints the list as a --buckets spec (on one
    line, never wrapped), its predicted cost, the free memory it needs, its expected padding
    (tokens computed for nothing when a batch is padded to the next bucket), and the trade-off
    curve.
    """
    from bcgprof.analysis.predict.advise import advise as choose
    from bcgprof.analysis.predict.advise import read_lengths
    from bcgprof.render import render
    from bcgprof.render.analysis import advice_view
    from bcgprof.report import read_report

    keep_freed_memory()
    if out is not None:
        from bcgprof.outputs import resolved_output
        from bcgprof.render.plot import image_path

        out = image_path(out)
        resolved_output(out, "--out", create_parents=True)
    limit = _size(budget)
    advice = choose(
        read_report(source),
        limit,
        mode=mode.value,
        lengths=read_lengths(lengths) if lengths is not None else None,
        free=_size(free, "--free") if free is not None else None,
    )
    view, console = advice_view(advice), stdout_console()
    render(view, format.value, console)
    flush_stdout()
    if out is not None:
        from bcgprof.render.plot import plot_advice

        note(f"wrote {plot_advice(advice, out)}")
