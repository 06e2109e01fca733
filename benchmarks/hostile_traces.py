"""What a hostile or oversized trace costs ``predict --buckets``: wall time and peak memory, cold
(no cache).

Each case is a copy of the committed default traced profile (``reports/gpt-oss-20b-h200-traced``)
with its per-bucket trace replaced:

* ``padded``: the real trace with 3,000,000 more valid rows (an ordinary pool's peak row, again and
  again): refused at the row cap while inflating;
* ``bomb``: the real trace's text followed by 1 GiB of zeros, compressed (about 1 MB on disk):
  refused at the text cap while inflating;
* ``at the caps``: the real trace with as many allocations and frees in its last bucket's capture as
  the row cap leaves room for, each of a size a free block holds and where the allocator puts it (so
  the trace still replays to the report's pools, and is used): every row parsed, every event
  replayed to check it;
* ``real``: the trace as committed, for comparison.

Each runs ``bcgprof predict --from COPY --buckets 1024,2048,4096,8192`` in a fresh process with an
empty cache directory; peak memory is the child's maximum resident set size.

python benchmarks/hostile_traces.py
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "reports" / "gpt-oss-20b-h200-traced"
TRACE = "traces-per-bucket.csv.gz"


def padded(text: bytes) -> bytes:
    last = text.rstrip(b"\n").rsplit(b"\n", 1)[1].split(b",")[0]
    return gzip.compress(text + (last + b",warmup,other,peak,,0,0,,,\n") * 3_000_000, 6)


def bomb(text: bytes) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    return (
        deflate.compress(text)
        + b"".join(deflate.compress(zeros) for _ in range(1024))
        + deflate.flush()
    )


def at_the_caps(text: bytes) -> bytes:
    """The trace with allocate-and-free pairs at the end of its last bucket's capture, each at the
    address the allocator model gives it after the whole list (so the check against the report still
    passes)."""
    from bcgprof.analysis.predict.replay import Replayer
    from bcgprof.report.traces import MAX_ROWS

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / TRACE
        path.write_bytes(gzip.compress(text))
        replayer = Replayer({"per-bucket": path})
        order = replayer.bucket_sources.order["per-bucket"] if replayer.bucket_sources.has("per-bucket") else []
        # the pool after the whole list (a benchmark may reach into the replayer: the state is
        # not public)
        state = replayer._advance("per-bucket", replayer.bucket_sources.sources("per-bucket", order), False, None)
        assert state is not None
        for size, stream in (
            (s, t) for s in (512, 3 << 20, 12 << 20) for t in range(4)
        ):  # a free block for it
            probe = state.pool.clone()
            block, grew = probe.malloc(size, stream)
            if not grew:
                break
        assert not grew, "no free block after the whole list"
    lines = text.rstrip(b"\n").split(b"\n")
    segments = {}  # base address -> segment number, from the graph pool's segment rows
    for line in lines[2:]:
        cells = line.split(b",")
        if cells[2] == b"graph" and cells[3] in (b"segment_alloc", b"segment_exists"):
            segments[int(cells[9])] = int(cells[4])
    number, offset = segments[block.segment], block.addr - block.segment
    last = lines[-1].split(b",")[0]
    first_id = 1 + max(
        int(line.split(b",")[4]) for line in lines[2:] if line.split(b",")[3] == b"alloc"
    )
    pairs = (MAX_ROWS - (len(lines) - 2)) // 2
    row = b"%s,capture,graph,%s,%d,%d,%d,%d,%d,\n"
    extra = b"".join(
        row % (last, b"alloc", i, size, stream, number, offset)
        + row % (last, b"free_completed", i, size, stream, number, offset)
        for i in range(first_id, first_id + pairs)
    )
    return gzip.compress(text + extra, 6)


def run(report: Path, cache: Path) -> tuple[float, float, float, int, str]:
    """(seconds, CPU seconds, peak MiB, exit code, last line of stderr) of one prediction in a fresh
    process."""
    cli = Path(sys.executable).with_name("bcgprof")
    argv = [str(cli)] if cli.is_file() else [sys.executable, "-m", "bcgprof"]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    start = time.perf_counter()
    child = subprocess.Popen(
        [*argv, "predict", "--from", str(report), "--buckets", "1024,2048,4096,8192"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert child.stderr is not None
    err = child.stderr.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - start
    line = err.strip().splitlines()[-1] if err.strip() else ""
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, child.returncode, line


def main() -> int:
    text = gzip.decompress((PROFILE / TRACE).read_bytes())
    cases = {
        "real": lambda t: gzip.compress(t, 6),
        "padded": padded,
        "bomb": bomb,
        "at the caps": at_the_caps,
    }
    print(
        f"{'case':<12} {'trace (MB)':>10} {'seconds':>8} {'CPU s':>6} {'peak MiB':>9} "
        f"{'exit':>5}  refusal"
    )
    with tempfile.TemporaryDirectory(prefix="bcgprof-hostile-") as tmp:
        for name, make in cases.items():
            report = Path(tmp) / name.replace(" ", "-")
            shutil.copytree(PROFILE, report)
            data = make(text)
            (report / TRACE).write_bytes(data)
            seconds, cpu, peak, code, line = run(report, Path(tmp) / f"cache-{report.name}")
            said = line.split(".csv.gz: ", 1)[-1].split(" (a trace may hold")[
                0
            ]  # without the path and the caps
            print(
                f"{name:<12} {len(data) / 1e6:>10.1f} {seconds:>8.1f} {cpu:>6.1f} {peak:>9.0f} "
                f"{code:>5}  {said[:60]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
