"""One recording: run a program with the hook, merge what its processes write into a report.

The program runs in a session of its own (its process group), with ``PYTHONPATH`` led by a folder
holding bcgprof's bootstrap (``sitecustomize``) and a link to this bcgprof, so every Python process
it starts loads the hook. Its stdout and stderr pass through bcgprof line by line (they are pipes
for the program, as under ``| tee``) and are scanned for the engines' capture-memory lines
(:mod:`bcgprof.record.logs`); ``scan_logs=False`` leaves them on the terminal untouched.

Every ``POLL_S``, and at once when the program ends, the lines the processes appended are merged
(:mod:`bcgprof.record.merge`) and, when they changed, the report's files are rewritten atomically
(:class:`~bcgprof.report.ReportWriter`): the folder is a valid report while the program runs, after
Ctrl-C and after a crash.

With ``stop_after_capture`` the program is stopped (SIGINT, then SIGTERM, then SIGKILL to its
process group) once no capture phase is open and either the engine printed that it serves
(:func:`~bcgprof.record.logs.serving_engine`) or ``idle_s`` passed without a new bucket or phase
after the first: a draft model's runners capture after the target's phase has ended, and an
engine's phase functions are not the whole of its capture. The program
starts with SIGINT at its default action and unblocked, as a terminal starts a program, whatever
bcgprof's own process inherited: a SIGINT ignored there (a job a script put in the background, a CI
runner) would otherwise pass to the program through exec, and the stop's first signal would do
nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Optional

from bcgprof.buckets import MAX_BUCKET_SIZE
from bcgprof.errors import BcgprofError
from bcgprof.record import adapters as table
from bcgprof.record.logs import MAX_KEPT, engine_figure, serving_engine
from bcgprof.record.merge import Merged, MergeError, merge
from bcgprof.record.rows import (
    MAX_FILE,
    MAX_FILES,
    SITE_LOADED,
    SPOOL,
    TORCH_HOOKED,
    LineReader,
    spool_of,
)
from bcgprof.report.schema import RunInfo
from bcgprof.report.write import ReportWriter
from bcgprof.version import __version__
from bcgprof.vocab import Phase, RecordGroup, RunStatus, Source

POLL_S = 0.5
STOP_GRACE_S = (10.0, 5.0)  # after SIGINT, then after SIGTERM
SITE = "site"


@dataclass
class RecordOptions:
    command: list[str]
    out: Path
    buckets: list[str] = field(default_factory=list)  # --bucket MODULE:QUALNAME:ARG
    adapters: bool = True
    stop_after_capture: bool = False
    idle_s: float = 10.0
    sample_interval_ms: float = 5.0
    model: str = ""
    scan_logs: bool = True
    trace: bool = False  # --trace: each group's allocator trace (bcgprof.record.history)


@dataclass
class RecordResult:
    report: Path
    status: str
    exit_code: int  # the program's; 0 when bcgprof stopped it after its capture
    merged: Merged
    engine_lines: list[dict[str, Any]]
    stopped: bool


SKIPS_THE_HOOK = {"I": "-I", "E": "-E", "S": "-S"}  # ignore PYTHONPATH, or skip site entirely


def hook_skipping_flags(command: list[str]) -> list[str]:
    """The interpreter flags of a ``python`` command that keep bcgprof's ``sitecustomize`` from
    loading (``-I`` and ``-E`` ignore PYTHONPATH, ``-S`` skips the site module), read up to the
    script, ``-m`` or ``-c``. A process started so is not recorded (nor are its ``multiprocessing``
    children, which inherit the flags), and nothing it prints says so."""
    if not command or not Path(command[0]).name.startswith("python"):
        return []
    found: list[str] = []
    words = iter(command[1:])
    for word in words:
        if not word.startswith("-") or word.startswith("--") or word == "-":
            break  # the script (or stdin), or a long option: no more interpreter flags to read
        for i, letter in enumerate(word[1:], start=1):
            if letter in "mc":  # the rest of the command is the program's
                return found
            if letter in "WX":  # -W ignore, -X dev: the rest of the word, or the next, is a value
                if i == len(word) - 1:
                    next(words, None)
                break
            if letter in SKIPS_THE_HOOK and SKIPS_THE_HOOK[letter] not in found:
                found.append(SKIPS_THE_HOOK[letter])
    return found


NOT_LOADED = (
    "no Python process of the program loaded the hook (not a Python program, or a launcher that "
    "resets PYTHONPATH or starts python with -I, -E or -S)"
)
NO_TORCH = (
    "no process that loaded the hook imported torch (a program whose processes that import torch "
    "were started without the hook: a parent that resets PYTHONPATH or runs python -I for them)"
)


def _nothing_captured(skipped: list[str], spool: Path) -> tuple[str, str]:
    """The message of a recording with no rows, and the warning it gives (or ""): why nothing was
    captured, where the marks the bootstrap and the hook leave in the spool can tell."""
    if skipped:
        return f"no graph was captured: python {' '.join(skipped)} did not load the hook", ""
    if not (spool / SITE_LOADED).exists():
        return f"no graph was captured: {NOT_LOADED}", NOT_LOADED
    if not (spool / TORCH_HOOKED).exists():
        return f"no graph was captured: {NO_TORCH}", NO_TORCH
    return "no graph was captured", ""


def check_options(options: RecordOptions) -> list[table.Adapter]:
    """Everything that can be refused before the program starts."""
    if not options.command:
        raise BcgprofError(
            "no command to record; give it after --, e.g. bcgprof record -- python my_script.py"
        )
    user = [table.parse_bucket_option(spec) for spec in options.buckets]
    if options.trace and not options.adapters and not user:
        raise BcgprofError(
            "--trace records the groups of bucket functions, and --no-adapters leaves none; give "
            "--bucket MODULE:QUALNAME:ARG, or drop --no-adapters"
        )
    out = options.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BcgprofError(
            f"--out {out} exists and is not an empty folder; give a new folder for the report"
        )
    if not 0 < options.idle_s <= 86400:
        raise BcgprofError(f"--idle {options.idle_s:g}: give seconds between 0 and 86400")
    if not 0 <= options.sample_interval_ms <= 10_000:
        raise BcgprofError(
            f"--sample-interval-ms {options.sample_interval_ms:g}: give 0 (off) to 10000"
        )
    return user


def _label(options: RecordOptions) -> tuple[str, str]:
    """The model name run.json gives, and a config hash that tells recordings of one program apart
    from others (a preset or config.json given as --model gives capture's own hash, so compare pairs
    them)."""
    if options.model:
        try:
            from bcgprof.spec import resolve_model

            spec = resolve_model(options.model)
            return spec.name, spec.config_hash
        except Exception:
            label = options.model
    else:
        words = [w for w in options.command if not w.startswith("-")]
        label = " ".join(Path(w).name for w in words[:3]) or "program"
    return label[:200], "rec-" + hashlib.sha256(label.encode()).hexdigest()[:16]


def _remove_report(out: Path, existed: bool) -> None:
    """Undo what :func:`record` wrote before its program started: the folder, or, where the user
    gave an empty one, what is in it."""
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for child in out.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _site(spool: Path) -> Path:
    site = spool / SITE
    site.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parent
    shutil.copyfile(here / "site" / "sitecustomize.py", site / "sitecustomize.py")
    (site / "bcgprof").symlink_to(here.parent, target_is_directory=True)
    return site


def _environment(
    options: RecordOptions, user: list[table.Adapter], spool: Path, site: Path
) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["BCGPROF_RECORD_DIR"] = str(spool)
    adapters = (list(table.ADAPTERS) if options.adapters else []) + user
    env["BCGPROF_RECORD_WATCH"] = ",".join(sorted({a.module for a in adapters}))
    env["BCGPROF_RECORD_BUCKETS"] = "\n".join(options.buckets)
    env["BCGPROF_RECORD_ADAPTERS"] = "on" if options.adapters else "off"
    env["BCGPROF_RECORD_SAMPLE_MS"] = f"{options.sample_interval_ms:g}"
    env["BCGPROF_RECORD_TRACE"] = "on" if options.trace else "off"
    return env


MAX_TEE_LINE = 1 << 20


class _Tee(threading.Thread):
    """Copies one of the program's streams to ours, a line at a time, keeping the engines'
    figures."""

    def __init__(
        self,
        source: IO[bytes],
        sink: IO[bytes],
        found: list[dict[str, Any]],
        serving: list[str],
    ):
        super().__init__(daemon=True)
        self.source, self.sink, self.found, self.serving = source, sink, found, serving

    def run(self) -> None:
        # a line of at most MAX_TEE_LINE bytes at a time: a program printing without newlines
        # cannot fill our memory
        for raw in iter(lambda: self.source.readline(MAX_TEE_LINE), b""):
            with contextlib.suppress(OSError, ValueError):
                self.sink.write(raw)
                self.sink.flush()
            # reading a figure never stops the copy: the program would block on a full pipe
            with contextlib.suppress(Exception):
                self._scan(raw.decode("utf-8", "replace"))

    def _scan(self, line: str) -> None:
        if len(self.found) < MAX_KEPT:
            figure = engine_figure(line)
            if figure is not None:
                self.found.append(figure)
        if not self.serving:
            engine = serving_engine(line)
            if engine is not None:
                self.serving.append(engine)


def _run_info(
    options: RecordOptions,
    merged: Merged,
    engine_lines: list[dict[str, Any]],
    status: str,
    started: str,
    message: str = "",
) -> RunInfo:
    model, config_hash = _label(options)
    first = merged.processes[0] if merged.processes else {}
    engines: dict[str, str] = {}
    for p in merged.processes:
        engines.update(p.get("engines") or {})
    groups = merged.groups
    named = [g for g in groups if g != RecordGroup.UNBUCKETED]  # graphs numbered, of any phase
    phase = Phase.DECODE if named and all(g == RecordGroup.DECODE for g in named) else Phase.PREFILL
    extra = {
        "sequences": merged.sequences,
        "recorded": {
            "command": options.command[:64],
            "hook_path": first.get("hook_path", ""),
            "engines": engines,
            "processes": [
                {"pid": p["pid"], "rank": p.get("rank"), "argv": (p.get("argv") or [])[:16]}
                for p in merged.processes[:64]
            ],
            "adapters": "on" if options.adapters else "off",
            "buckets": options.buckets,
            "engine_log": engine_lines[:MAX_KEPT],
            "notes": merged.notes[:32],
            "hook_cost": merged.hook_cost(),
            "between_buckets": [span.as_json() for span in merged.spans_by_rank()[:64]],
            "traces": merged.traces if options.trace else None,
        },
    }
    return RunInfo(
        bcgprof_version=__version__,
        command=" ".join(options.command)[:2000],
        model=model,
        model_source="record",
        config_hash=config_hash,
        phase=phase,
        buckets=merged.buckets,
        modes=list(groups),
        gpu_name=first.get("gpu", ""),
        driver=first.get("driver", ""),
        torch_version=first.get("torch", ""),
        cuda_version=first.get("cuda", ""),
        memory_source=first.get("memory_source", ""),
        tp=merged.tp,
        started_at=started,
        ended_at=_now() if status != RunStatus.RUNNING else "",
        status=status,
        message=message,
        extra=extra,
        source=Source.RECORD,
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _interruptible() -> None:
    """In the program's process, between fork and exec: SIGINT back to its default action and
    unblocked (two system calls, nothing that takes a lock)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to the program's process group, then SIGTERM, then SIGKILL, each after a grace
    period."""
    for sig, grace in (
        (signal.SIGINT, STOP_GRACE_S[0]),
        (signal.SIGTERM, STOP_GRACE_S[1]),
        (signal.SIGKILL, 5.0),
    ):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def record(
    options: RecordOptions, progress: Optional[Callable[[str], None]] = None
) -> RecordResult:
    """Run ``options.command`` under the hook and write its report to ``options.out`` (see the
    module)."""
    user = check_options(options)
    skipped = hook_skipping_flags(options.command)
    if skipped and progress is not None:
        progress(
            f"warning: {' '.join(skipped)} keeps Python from loading the hook (PYTHONPATH or site "
            "ignored): this process records nothing; drop the flag to record it"
        )
    out = options.out
    spool = spool_of(out)
    existed = out.exists()  # and empty: check_options refused anything else
    started = _now()
    engine_lines: list[dict[str, Any]] = []
    merged = Merged()
    try:
        site = _site(spool)
        ReportWriter(out, _run_info(options, merged, engine_lines, RunStatus.RUNNING, started), [])
    except OSError as e:  # a file on the way, a read-only or special file system
        raise BcgprofError(
            f"--out {out} cannot be created: {e.strerror or e}; give a new folder somewhere "
            "writable"
        ) from None
    pipe = subprocess.PIPE if options.scan_logs else None
    try:
        proc = subprocess.Popen(
            options.command,
            env=_environment(options, user, spool, site),
            stdout=pipe,
            stderr=pipe,
            start_new_session=True,
            preexec_fn=_interruptible,
        )
    except OSError as e:  # nothing ran: leave --out as it was (absent or empty)
        _remove_report(out, existed)
        raise BcgprofError(
            f"cannot start {options.command[0]!r}: {e.strerror or e}; check the command after --"
        ) from None
    tees = []
    serving: list[str] = []  # the engine that said it serves, once it did
    if options.scan_logs:
        tees = [
            _Tee(proc.stdout, sys.stdout.buffer, engine_lines, serving),  # type: ignore[arg-type]
            _Tee(proc.stderr, sys.stderr.buffer, engine_lines, serving),  # type: ignore[arg-type]
        ]
        for t in tees:
            t.start()
    stopped = interrupted = False
    seen: tuple = (0, 0, 0)  # rows, phases open, phases ended: a change restarts the quiet time
    last_change = time.monotonic()
    state: tuple = ()
    lines = LineReader(spool)
    try:
        while proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=POLL_S)  # returns as soon as the program ends
            merged = merge(lines.read())
            activity = (len(merged.rows), merged.phases_open, merged.phases_ended)
            now_state = (*activity, len(engine_lines), len(merged.processes))
            if now_state != state:
                state = now_state
                _write(out, options, merged, engine_lines, RunStatus.RUNNING, started)
            if activity != seen:
                if activity[0] != seen[0] and progress is not None:
                    progress(f"{activity[0]} bucket(s) recorded in {', '.join(merged.groups)}")
                seen, last_change = activity, time.monotonic()
            quiet_s = time.monotonic() - last_change
            if options.stop_after_capture and _capture_over(
                merged, bool(serving), quiet_s, options.idle_s
            ):
                stopped = True
                if progress is not None:
                    why = f"{serving[0]} serves" if serving else f"{quiet_s:.0f} s with no capture"
                    progress(f"capture phase over ({why}): stopping the program")
                _stop(proc)
                break
    except KeyboardInterrupt:
        interrupted = True
        _stop(proc)
    except MergeError as e:
        _stop(proc)
        raise BcgprofError(f"{e}; record a smaller run") from None
    finally:
        if proc.poll() is None:
            _stop(proc)
        for t in tees:
            t.join(timeout=5.0)
        shutil.rmtree(site, ignore_errors=True)
    code = proc.returncode if proc.returncode is not None else -1
    merged = merge(lines.read())
    if lines.unparsed:  # whole lines that are not a JSON object with a kind and a pid
        merged.malformed += lines.unparsed
        merged.malformed_first = merged.malformed_first or "a line that is not the hook's JSON"
    if lines.unread:
        merged.notes.append(
            f"the recording's {SPOOL} folder held more than bcgprof reads (files over "
            f"{MAX_FILE >> 20} MiB, more than {MAX_FILES} files, or entries that are not files: "
            f"{', '.join(sorted(lines.unread)[:3])}); the rest was not read"
        )
        if progress is not None:
            progress(f"warning: {merged.notes[-1]}")
    for text in _bucket_notes(merged, options.buckets):
        merged.notes.append(text)
        if progress is not None:
            progress(f"warning: {text}")
    empty, why_empty = _nothing_captured(skipped, spool)
    if why_empty and not merged.rows and progress is not None:
        progress(f"warning: {why_empty}")
    if interrupted:
        status, message = RunStatus.INTERRUPTED, "interrupted (Ctrl-C): the rows recorded so far"
    elif stopped or code == 0:
        status = RunStatus.COMPLETE if merged.complete and merged.rows else RunStatus.PARTIAL
        message = "" if status == RunStatus.COMPLETE else "; ".join(merged.notes[:3]) or empty
    else:
        status = RunStatus.PARTIAL if merged.rows else RunStatus.FAILED
        message = f"the program exited with code {code}"
    _write(out, options, merged, engine_lines, status, started, message)
    return RecordResult(out, status, 0 if stopped else code, merged, engine_lines, stopped)


def _bucket_notes(merged: Merged, user_buckets: list[str]) -> list[str]:
    """What the rows' bucketing missed: calls whose size argument gave no size (their rows are
    numbered, not sized), graphs without a size in a group with sized rows (rows of
    ``unbucketed``), and ``--bucket`` functions around none of the program's captures."""
    notes = []
    for by, calls in sorted(merged.unsized_calls.items()):
        if by == table.USER_LABEL:
            who, hint = "--bucket's function", "check --bucket's ARG"
        else:
            who = f"adapter {by}"
            hint = "its size rule does not fit this program; give --bucket MODULE:QUALNAME:ARG"
        notes.append(
            f"{calls} call(s) of {who} gave no positive int (at most {MAX_BUCKET_SIZE}) from the "
            f"size argument: their rows are numbered in capture order; {hint}"
        )
    for group, count in merged.unbucketed.items():
        notes.append(
            f"{count} graph(s) of {group} without a size (captured outside its bucket function, "
            f"or by a call whose size could not be read) are rows of {RecordGroup.UNBUCKETED}, "
            "numbered in capture order apart from its sized rows"
        )
    for span in merged.spans_by_rank():
        if span.overlapping:
            notes.append(
                f"rank {span.rank} (process {span.pid}): {span.overlapping} bucket(s) began while "
                "another of its buckets was open (captures on several threads); each one's "
                "figures, read device-wide and over the process's graph pools, include the other's"
            )
    if merged.malformed:
        notes.append(
            f"{merged.malformed} line(s) in the recording's {SPOOL} folder were not of the hook's "
            f"shape and were skipped (the first: {merged.malformed_first}); the program or "
            "something else wrote there"
        )
    if user_buckets and merged.graphs_alone and not (merged.bucket_calls or merged.unsized_calls):
        notes.append(
            f"--bucket {', '.join(user_buckets)}: no call of it enclosed a capture, so the "
            f"{merged.graphs_alone} graph(s) are a row each; check MODULE and QUALNAME (the "
            "program must call it through that module or class)"
        )
    return notes


def _capture_over(merged: Merged, serving: bool, quiet_s: float, idle_s: float) -> bool:
    """Whether a recording with ``--stop-after-capture`` may stop the program: no capture phase
    open, and the engine said it serves (engines capture before they serve, so a server that
    captured nothing, its CUDA graphs disabled, is over too), or something was captured and nothing
    new came for ``idle_s``."""
    if merged.phases_open:
        return False
    if serving:
        return True
    return bool(merged.rows or merged.phases_ended) and quiet_s >= idle_s


def _write(
    out: Path,
    options: RecordOptions,
    merged: Merged,
    engine_lines: list[dict[str, Any]],
    status: str,
    started: str,
    message: str = "",
) -> None:
    run = _run_info(options, merged, engine_lines, status, started, message)
    ReportWriter(out, run, merged.rows)  # a fresh merge: the rows are its own
