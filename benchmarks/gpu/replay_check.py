"""Does the replay reproduce what was measured? (no GPU needed to run it; the reports come from one)

    python3 benchmarks/gpu/replay_check.py PROFILE [HELD_OUT ...]

PROFILE is a report captured with allocator traces. For each of its modes the profile's own list
is replayed with every allocation's address checked against the recorded one, and every row's
``pool_bytes`` compared with the measured row. Each HELD_OUT report (another list, captured on the
same machine) is predicted from PROFILE and compared row by row, and its device-used total too.
Prints one line per mode and list and a table last; exits 1 if any pool row differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

MIB = 1 << 20


def _rows(report, mode):
    return sorted((r for r in report.buckets if r.mode == mode and r.rank == 0), key=lambda r: r.order)


def main(argv: list[str]) -> int:
    from bcgprof.analysis.predict.lists import bucket_profile, predict_buckets
    from bcgprof.report import read_report
    from bcgprof.report.traces import trace_name

    profile = read_report(argv[0])
    held_out = [read_report(p) for p in argv[1:]]
    p = bucket_profile(profile)
    table, bad = [], 0
    for mode in profile.modes():
        size = (Path(profile.path) / trace_name(mode)).stat().st_size
        check = p.replayer.check(mode)
        measured = [r.pool_bytes for r in _rows(profile, mode)]
        same = sum(a == b for a, b in zip(check.pool_bytes, measured, strict=False))
        first = next((r.bucket for r, a in zip(_rows(profile, mode), check.pool_bytes, strict=False)
                      if a != r.pool_bytes), None)
        bad += same != len(measured)
        print(f"{mode}: own list, {same}/{len(measured)} rows' pool_bytes exact, {check.mismatches} allocations "
              f"placed elsewhere than recorded, trace {size / MIB:.2f} MiB" + (f", first differing bucket {first}"
                                                                            if first else ""))
        table.append((mode, "own", len(measured), same, check.mismatches, check.pool_bytes[-1] - measured[-1], 0.0))
    for report in held_out:
        for mode in report.modes():
            rows = _rows(report, mode)
            pred = predict_buckets(profile, [r.bucket for r in rows], [mode], profile=p).mode(mode)
            assert pred is not None
            same = sum(a.pool_bytes == r.pool_bytes for a, r in zip(pred.buckets, rows, strict=True))
            bad += same != len(rows)
            total = next(s.device_used_bytes for s in report.summary if s.mode == mode)
            error = 100.0 * (pred.device_used_bytes - total) / total
            print(f"{mode}: {report.path.name}, {same}/{len(rows)} rows' pool_bytes exact, device used "
                  f"{pred.device_used_bytes / MIB:.0f} MiB predicted vs {total / MIB:.0f} measured ({error:+.2f}%), "
                  f"within band: {pred.low_bytes <= total <= pred.high_bytes}")
            table.append((mode, report.path.name, len(rows), same, None, pred.pool_bytes - rows[-1].pool_bytes,
                          error))
    print()
    print(f"{'mode':15} {'list':28} {'rows':>5} {'exact':>6} {'misplaced':>9} {'pool diff MiB':>13} "
          f"{'device used %':>13}")
    for mode, name, n, same, misplaced, diff, error in table:
        print(f"{mode:15} {name[:28]:28} {n:5d} {same:6d} {'' if misplaced is None else misplaced:>9} "
              f"{diff / MIB:13.1f} {error:+13.2f}")
    print("POOL REPLAY:", "EXACT" if not bad else f"{bad} list(s) with differing rows")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
