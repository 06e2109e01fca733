"""What `bcgprof capture` shows while it runs: the announcement line and a live progress
bar (mode, bucket, done/total, pool so far, elapsed), drawn from the runner's events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from rich.console import Console
from rich.markup import escape

from bcgprof.report_format import fmt_bytes
from bcgprof.text import printable

if TYPE_CHECKING:  # rich.progress is imported when the bar starts
    from rich.progress import Progress, TaskID


class CaptureProgress:
    """Feed :meth:`handle` the runner's events; use as a context manager around the run."""

    def __init__(self, console: Console):
        self.console = console
        self.progress: Optional[Progress] = None
        self.task: Optional[TaskID] = None  # set with progress, by _start
        self.warned_source = False

    def __enter__(self) -> CaptureProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()

    def _start(self, total: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        progress = Progress(
            TextColumn("[bold]{task.fields[mode]:>10}"),
            TextColumn("bucket {task.fields[bucket]:>6}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("pool {task.fields[pool]:>10}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self.progress = progress
        self.task = progress.add_task("capture", total=total, mode="", bucket="-", pool="-")
        progress.start()

    def handle(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "begin":
            buckets = event["buckets"]
            tp = f" on {event['tp']} tensor-parallel ranks" if event.get("tp", 1) > 1 else ""
            self.console.print(
                f"bcgprof capture: {event['model']} ({event['layers']} layers, "
                f"{event['dtype']}){tp}, "
                f"{len(buckets)} buckets {buckets[0]}..{buckets[-1]}, modes "
                f"{', '.join(event['modes'])} -> {event['out']}",
                highlight=False,
            )
            self._start(event["total"])
            return
        progress, task = self.progress, self.task
        if progress is None or task is None:  # no bar before the begin event
            return
        if kind == "memory_source" and event["source"] != "nvml" and not self.warned_source:
            self.warned_source = True
            self.console.print(
                f"[yellow]NVML unavailable ({event.get('reason') or 'no reason given'}); "
                "device memory is read with torch.cuda.mem_get_info and no peak sampling[/]"
            )
        elif kind == "start":
            progress.update(task, mode=event["mode"], bucket="build")
        elif kind == "bucket":
            progress.update(
                task, advance=1, bucket=str(event["bucket"]), pool=fmt_bytes(event["pool_bytes"])
            )
            if event["status"] != "ok":
                self.console.print(
                    f"[red]{event['mode']} bucket {event['bucket']}: {event['status']}: "
                    f"{escape(printable(event['detail']))}[/]",
                    highlight=False,
                )
        elif kind == "verify":
            progress.update(task, bucket="verify")
        elif kind == "warning":
            self.console.print(
                f"[yellow]{event['mode']}: {escape(printable(event['message']))}[/]",
                highlight=False,
            )
        elif kind == "error":
            self.console.print(
                f"[red]{event['mode']}: {escape(printable(event['message']))}[/]", highlight=False
            )
