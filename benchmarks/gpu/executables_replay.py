"""Replay time per bucket with one graph executable per segment and with executables shared per
signature (GPU).

    python benchmarks/gpu/executables_replay.py [--model gpt-oss-20b] [--num-layers N]
        [--buckets 8,64,512,2048,8192,16384] [--mode shared] [--weights dummy] [--repeats 10]

The model is built once; its buckets are captured with ``executables="per-segment"``, replayed and
timed, then dropped, and captured again with ``executables="per-signature"`` and timed the same way.
Each bucket is replayed as an engine replays it: its graph on the static input buffers, one replay
after another on the same stream. Per bucket, after three untimed replays, ``--repeats`` timed ones:

* device ms: CUDA events on the current stream around one replay (what the GPU spends, including
  any gap the host leaves between launches);
* host ms: wall time from the call to its return, without a synchronise (the launches, the eager
  breaks' launches and, with sharing, the executable updates);
* updates: executable updates per replay (per-signature).

Both captures' outputs of each bucket must be equal bit for bit. Progress goes to stderr;
stdout gets one table, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

import torch


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _time_replays(result, bucket: int, repeats: int) -> dict:
    """Median device and host milliseconds of one replay of ``bucket``, and updates per replay."""
    for _ in range(3):
        result.replay(bucket)
    torch.cuda.synchronize()
    share = result.executables
    updates = share.updates if share is not None else 0
    device, host = [], []
    stream = torch.cuda.current_stream()
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        t = time.perf_counter()
        result.replay(bucket)
        host.append((time.perf_counter() - t) * 1000.0)
        end.record(stream)
        torch.cuda.synchronize()
        device.append(start.elapsed_time(end))
    made = (share.updates - updates) / repeats if share is not None else 0.0
    return {"device_ms": statistics.median(device), "host_ms": statistics.median(host),
            "updates": made}


def _capture_and_time(workload, buckets: list[int], opts, mode: str, choice: str,
                      repeats: int) -> tuple[dict, dict]:
    from dataclasses import replace

    from bcgprof.measure.capture import capture_buckets

    _log(f"capturing {len(buckets)} buckets in mode {mode} with executables {choice}")
    result = capture_buckets(workload.fn, workload.inputs, buckets,
                             replace(opts, executables=choice), mode=mode)
    bad = [r for r in result.records if r.status != "ok"]
    if bad:
        raise SystemExit(f"bucket {bad[0].bucket} failed with executables {choice}: "
                         f"{bad[0].detail}")
    rows, outputs = {}, {}
    for bucket in buckets:
        rec = next(r for r in result.records if r.bucket == bucket)
        timing = _time_replays(result, bucket, repeats)
        outputs[bucket] = result.replay(bucket).clone()
        rows[bucket] = dict(timing, segments=rec.segments, executables=rec.executables,
                            signatures=rec.signatures, non_torch_bytes=rec.non_torch_delta_bytes)
        _log(f"  {choice} {bucket}: device {timing['device_ms']:.3f} ms, "
             f"host {timing['host_ms']:.3f} ms")
    del result
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return rows, outputs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-oss-20b")
    ap.add_argument("--num-layers", type=int, default=None)
    ap.add_argument("--buckets", default="8,64,512,2048,8192,16384")
    ap.add_argument("--mode", default="shared",
                    help="per-bucket or shared (SGLang's breakable backend shares its output)")
    ap.add_argument("--weights", default="dummy")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--graph", default="breakable")
    args = ap.parse_args()

    from bcgprof.buckets import parse_buckets
    from bcgprof.measure.workload import build_workload
    from bcgprof.options import CaptureOptions
    from bcgprof.spec import resolve_model

    spec = resolve_model(args.model)
    buckets = parse_buckets(args.buckets)
    device = torch.device("cuda", torch.cuda.current_device())
    workload = build_workload(spec, weights=args.weights, num_layers=args.num_layers,
                              device=device, max_tokens=max(buckets), seed=0)
    opts = CaptureOptions(model=args.model, graph=args.graph, verify="none", warmup=2)
    with torch.no_grad():
        each, out_each = _capture_and_time(workload, buckets, opts, args.mode, "per-segment",
                                           args.repeats)
        shared, out_shared = _capture_and_time(workload, buckets, opts, args.mode, "per-signature",
                                               args.repeats)
    differ = [b for b in buckets if not torch.equal(out_each[b], out_shared[b])]

    print(f"{'bucket':>7} {'segments':>8} {'execs':>6} {'shared':>6} {'upd/rep':>7} "
          f"{'device ms':>10} {'shared':>10} {'diff':>7} {'host ms':>8} {'shared':>8}")
    for b in buckets:
        e, s = each[b], shared[b]
        diff = 100.0 * (s["device_ms"] - e["device_ms"]) / e["device_ms"] if e["device_ms"] else 0.0
        print(f"{b:7d} {e['segments']:8d} {e['executables']:6d} {s['executables']:6d} "
              f"{s['updates']:7.1f} {e['device_ms']:10.3f} {s['device_ms']:10.3f} {diff:+6.1f}% "
              f"{e['host_ms']:8.3f} {s['host_ms']:8.3f}")
    print(json.dumps({"model": spec.name, "layers": args.num_layers, "mode": args.mode,
                      "graph": args.graph, "gpu": torch.cuda.get_device_name(),
                      "repeats": args.repeats, "per_segment": each, "per_signature": shared,
                      "outputs_differ": differ}))
    if differ:
        _log(f"outputs differ between the two captures at buckets {differ}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
