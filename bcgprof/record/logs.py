"""The capture-memory lines engines print, read from a recorded program's output.

* SGLang: ``Capture {target|draft} {decode|prefill|...} CUDA graph end. elapsed=T s, mem usage=X GB,
  avail mem=Y GB.`` and, in older versions, ``Capture cuda graph end. Time elapsed: T s. mem usage=X
  GB. avail mem=Y GB.`` X is the free memory before its graph runner was built minus after, in GiB
  (printed as "GB").
* vLLM: ``Graph capturing finished in N secs, took X GiB`` (free memory before and after the capture
  loop), since v0.21 ``CUDA graph pool memory: X GiB (actual), Y GiB (estimated)``, and, before the
  KV cache is sized, ``Estimated CUDA graph memory: X GiB total`` (its estimate's captures).

A figure of free memory before minus after is negative where the device gained free memory (a cache
emptied during the capture); it is kept with its sign.

Each match becomes a dict with the engine, the phase where the line names one, the tensor-parallel
rank and pid where the engine's prefix names them (SGLang's ``[... TP1]``, vLLM's ``(Worker_TP1
pid=514)``), and the figure in bytes (``GiB`` and SGLang's ``GB`` both as 2**30 bytes). The line
a server prints once it serves (SGLang's ``The server is fired up and ready to roll!``, vLLM's
``Starting vLLM API server``), after every model runner and draft model has captured, tells
``--stop-after-capture`` that the capture is over. Standard library only.
"""

from __future__ import annotations

import re
from typing import Any, Optional

GIB = 2**30
_NUMBER = r"-?(?:[0-9]{1,12}(?:\.[0-9]{0,12})?|\.[0-9]{1,12})"  # a figure as engines print it
_PATTERNS = (
    (
        "sglang",
        re.compile(
            r"Capture (?:(?P<target>target|draft) )?(?P<phase>[a-z_-]+ )?cuda graph end\..*?"
            rf"mem usage=(?P<x>{_NUMBER}) GB",
            re.IGNORECASE,
        ),
        "mem usage",
    ),
    (
        "vllm",
        re.compile(rf"Graph capturing finished in (?P<t>[0-9.]+) secs?, took (?P<x>{_NUMBER}) GiB"),
        "took",
    ),
    (
        "vllm",
        re.compile(rf"Estimated CUDA graph memory: (?P<x>{_NUMBER}) GiB total"),
        "estimate",
    ),
    (
        "vllm",
        re.compile(
            rf"CUDA graph pool memory: (?P<x>{_NUMBER}) GiB \(actual\), (?P<y>{_NUMBER}) GiB "
            r"\(estimated\)"
        ),
        "pool memory",
    ),
)
MAX_KEPT = 64  # engine lines kept in run.json
_TP = re.compile(r"(?<![A-Za-z0-9])TP([0-9]{1,4})(?![0-9])")
_PID = re.compile(r"\bpid=([0-9]{1,10})\b")
_SERVING = (
    ("sglang", "The server is fired up and ready to roll"),
    ("vllm", "Starting vLLM API server"),
)


def serving_engine(line: str) -> Optional[str]:
    """The engine whose line this is that says its server serves (its capture over), or None."""
    if len(line) > 4096:
        return None
    return next((engine for engine, text in _SERVING if text in line), None)


def engine_figure(line: str) -> Optional[dict[str, Any]]:
    """The capture-memory figure a line of engine output states, or None."""
    if len(line) > 4096 or ("graph" not in line and "Graph" not in line):
        return None
    for engine, pattern, what in _PATTERNS:
        m = pattern.search(line)
        if m is None:
            continue
        found: dict[str, Any] = {
            "engine": engine,
            "what": what,
            "bytes": round(float(m["x"]) * GIB),
            "line": line.strip()[:300],
        }
        groups = m.groupdict()
        if groups.get("phase"):
            found["phase"] = groups["phase"].strip().lower()
        if groups.get("target"):
            found["target"] = groups["target"].lower()
        if groups.get("y"):
            found["estimated_bytes"] = round(float(m["y"]) * GIB)
        # who printed it, where the engine's prefix says: SGLang's "[... TP1]", vLLM's
        # "(Worker_TP1 pid=514)" or "(EngineCore pid=75)"
        tp, pid = _TP.search(line[: m.start()]), _PID.search(line[: m.start()])
        if tp is not None:
            found["tp"] = int(tp[1])
        if pid is not None:
            found["pid"] = int(pid[1])
        return found
    return None
