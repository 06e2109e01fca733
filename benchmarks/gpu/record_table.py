"""The table record_proof.sh prints: each recording's rows and totals beside what its program measured,
and bcgprof capture recorded from outside beside its own report, bucket by bucket."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from bcgprof.report import read_report

MIB = 2 ** 20


def program_figure(log: Path) -> str:
    m = re.search(r"program: .*?took (\d+) bytes", log.read_text(errors="replace")) if log.exists() else None
    return f"{int(m[1]) / MIB:.1f}" if m else "-"


def main(out: Path) -> None:
    print(f"{'recording':<20} {'status':<9} {'rows':>4} {'groups':<12} {'ranks/pids':<12} {'used MiB':>9} "
          f"{'program MiB':>11}")
    for name, log in (("recorded-loop", "loop"), ("recorded-child", "child"), ("recorded-torchrun", "torchrun"),
                      ("recorded-compiled", "compiled"), ("recorded-capture", "recorded-capture")):
        path = out / name
        try:
            r = read_report(path)
        except Exception as e:
            print(f"{name:<20} unreadable: {e}")
            continue
        used = sum(b.device_used_delta_bytes for b in r.buckets) / MIB
        ranks = ",".join(sorted({f"{b.rank}/{b.pid}" for b in r.buckets}))
        print(f"{name:<20} {r.run.status:<9} {len(r.buckets):>4} {','.join(r.run.modes):<12} {ranks:<12} "
              f"{used:>9.1f} {program_figure(out / f'{log}.log'):>11}")
    try:
        native, rec = read_report(out / "native"), read_report(out / "recorded-capture")
    except Exception as e:
        print(f"native vs recorded capture: {e}")
        return
    mine = {b.bucket: b for b in rec.buckets}
    print(f"\n{'bucket':>6} {'pool native':>12} {'pool recorded':>14} {'used native':>12} {'used recorded':>14}")
    same = 0
    for b in native.buckets:
        o = mine.get(b.bucket)
        if o is None:
            print(f"{b.bucket:>6} {b.pool_bytes:>12} {'-':>14}")
            continue
        same += o.pool_bytes == b.pool_bytes
        print(f"{b.bucket:>6} {b.pool_bytes:>12} {o.pool_bytes:>14} {b.device_used_delta_bytes:>12} "
              f"{o.device_used_delta_bytes:>14}")
    print(f"pool bytes equal on {same} of {len(native.buckets)} buckets")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
