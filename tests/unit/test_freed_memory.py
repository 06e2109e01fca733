"""`predict` and `advise` keep the memory their process frees (glibc's malloc,
bcgprof.cli.whatif.keep_freed_memory): reading a trace a second time in the same process then takes
fewer page faults, counted (not timed) in a child process of its own each way, since the setting is
the whole process's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "reports" / "gpt-oss-20b-h200-traced" / "traces-shared.csv.gz"
CHILD = """
import io, resource, sys
from pathlib import Path
from bcgprof.report.trace_read import parse
path = Path(sys.argv[1])
raw = path.read_bytes()
if sys.argv[2] == "kept":
    from bcgprof.cli.whatif import keep_freed_memory
    keep_freed_memory()
parse(path, io.BytesIO(raw))  # the first reading gets its memory from the kernel either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
parse(path, io.BytesIO(raw))
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (AttributeError, ValueError, OSError):
        return False


def _faults(how: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(TRACE), how],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return int(done.stdout)


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")
def test_a_trace_read_again_reuses_the_memory_the_first_reading_freed():
    if not TRACE.exists():
        pytest.skip("the committed trace is not in this checkout")
    plain, kept = _faults("plain"), _faults("kept")
    assert kept * 4 < plain, (plain, kept)


def test_keeping_freed_memory_is_a_no_op_without_glibc(monkeypatch):
    from bcgprof.cli import whatif

    def no_glibc(name: str) -> str:
        raise ValueError(name)

    monkeypatch.setattr(os, "confstr", no_glibc)
    monkeypatch.setitem(sys.modules, "ctypes", None)  # importing it would fail
    whatif.keep_freed_memory()
