"""Runs `bcgprof capture`: one process per mode, rows merged into one report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


@dataclass
class CaptureOptions:
    model: str = "gpt-oss-20b"
    weights: str = "dummy"  # dummy | safetensors
    num_layers: Optional[int] = None
    phase: str = "prefill"  # prefill | decode
    buckets: Optional[str] = None  # bucket spec; None = the phase's SGLang preset
    max_tokens: int = 16384
    max_bs: int = 256
    modes: list[str] = field(default_factory=lambda: ["per-bucket", "shared", "floor"])
    warmup: int = 2
    device: str = "cuda:0"
    out: Optional[Path] = None  # None = reports/<model>-<timestamp>
    verify: str = "smallest-largest"  # smallest-largest | all | none
    in_process: bool = False
    sample_interval_ms: float = 2.0
    tp: int = 1
    seed: int = 0
    command: str = ""  # the command line, recorded in run.json


def run_capture(opts: CaptureOptions) -> int:
    """Run every mode, write the report, print the tables and verdict; return the exit code."""
    raise NotImplementedError
