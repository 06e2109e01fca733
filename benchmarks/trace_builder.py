"""How long turning the allocator's history into trace rows takes, per history entry.

A capture turns every bucket's allocator history (tens of thousands of entries a bucket, about 4
million a 74-bucket mode of gpt-oss-20b) into trace rows between its steps, so this cost is part
of each mode's measurement time. The input is real: the 200,000 entries of the committed floor
capture's history (``reports/gpt-oss-20b-h200-snapshot``), read as one window and as four.
With ``--against REF`` the builder of git revision REF runs on the same entries too, and the
rows of the two are compared (they must be equal).

    python benchmarks/trace_builder.py [--against REF] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent.parent
SNAPSHOT = HERE / "reports" / "gpt-oss-20b-h200-snapshot" / "floor.snapshot.pickle.gz"
MODULE = "bcgprof/measure/trace_events.py"


def builder_of(ref: str, into: Path) -> ModuleType:
    """The trace_events module as it was at git revision ``ref`` (it imports today's bcgprof otherwise)."""
    source = subprocess.run(["git", "-C", str(HERE), "show", f"{ref}:{MODULE}"], check=True,
                            capture_output=True, text=True).stdout
    path = into / f"trace_events_{ref.replace('/', '_')}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def rows_and_time(module: ModuleType, snap: dict, pool: tuple, windows: int, repeat: int) -> tuple[list, float]:
    entries = snap["device_traces"][0]
    step = -(-len(entries) // windows)
    best, rows = float("inf"), []
    for _ in range(repeat):
        builder = module.TraceBuilder(pool)
        start = time.perf_counter()
        rows = [row for k in range(windows)
                for row in builder.window(entries[k * step:(k + 1) * step], snap["segments"], 16384, "capture")]
        best = min(best, time.perf_counter() - start)
    return rows, best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="a git revision whose builder runs on the same entries")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each; the fastest counts")
    args = parser.parse_args(argv)
    snap = pickle.loads(gzip.decompress(SNAPSHOT.read_bytes()))
    pool = next(tuple(s["segment_pool_id"]) for s in snap["segments"] if tuple(s["segment_pool_id"]) != (0, 0))
    entries = len(snap["device_traces"][0])
    sys.path.insert(0, str(HERE))
    from bcgprof.measure import trace_events

    builders = {"working tree": trace_events}
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            builders[args.against] = builder_of(args.against, Path(tmp))
        print(f"{entries:,} history entries of the floor capture; fastest of {args.repeat}")
        print(f"{'builder':<16} {'windows':>7} {'ms':>8} {'ns/entry':>9} {'rows':>6}")
        results = {}
        for name, module in builders.items():
            for windows in (1, 4):
                rows, seconds = rows_and_time(module, snap, pool, windows, args.repeat)
                results[(name, windows)] = rows
                print(f"{name:<16} {windows:>7} {seconds * 1e3:>8.1f} {seconds / entries * 1e9:>9.0f} {len(rows):>6}")
    if args.against:
        same = all(results[("working tree", w)] == results[(args.against, w)] for w in (1, 4))
        print(f"rows equal to {args.against}'s: {'yes' if same else 'NO'}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
