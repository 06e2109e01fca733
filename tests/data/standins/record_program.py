"""A program for `bcgprof record`'s CPU tests: it captures through the engines' stand-ins with a
stand-in graph class (the shape of torch.cuda.CUDAGraph's capture API) and stand-in readings, so
every figure of its report is known: a capture of size S grows the pool and torch reserved by S MiB
and the device by S MiB plus 2 MiB of executable."""

import argparse
import multiprocessing
import os
import sys
import time

import torch

from bcgprof.record import hook

MIB = 2**20
BASE = 1000 * MIB


class State:
    pool = 0
    reserved = 0
    used = BASE
    calls = 0
    crash_after = 0


class StandInGraph:
    def __init__(self):
        self._pool = (0, 0)

    def capture_begin(self, pool=None, capture_error_mode="global"):
        self._pool = pool

    def capture_end(self):
        pass

    def instantiate(self):
        pass

    def pool(self):
        return self._pool


def reading():
    return {
        "allocated": State.pool,
        "reserved": State.reserved,
        "used": State.used,
        "process": State.used - BASE,
        "free": 80_000 * MIB - State.used,
        "pools": {"1,1": [State.pool, State.pool]},
        "time": time.time(),
    }


def forward(size):
    State.calls += 1
    if State.crash_after and State.calls > State.crash_after:
        raise RuntimeError("stand-in failure")
    g = StandInGraph()
    g.capture_begin(pool=(1, 1))
    State.pool += size * MIB
    State.reserved += size * MIB
    State.used += size * MIB + 2 * MIB
    g.capture_end()
    g.instantiate()


def install():
    rec = hook.recorder()
    rec.read = reading
    rec.patch_graphs(StandInGraph)
    print(
        "torch.cuda.CUDAGraph patched:",
        bool(getattr(torch.cuda.CUDAGraph, "__bcgprof_recorded__", False)),
        flush=True,
    )


def sglang(sizes, logged_gb):
    from sglang.srt.model_executor.model_runner_components.cuda_graph_setup import (
        capture_cuda_graphs,
    )
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    capture_cuda_graphs(
        [DecodeCudaGraphRunner(sizes, forward), PrefillCudaGraphRunner([16, 32], forward)],
        logged_gb,
    )


def child(rank):
    os.environ["RANK"] = str(rank)
    install()
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    DecodeCudaGraphRunner([1, 2, 4, 8], forward).capture()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", choices=["sglang", "vllm", "plain", "bucket"], default="sglang")
    p.add_argument("--child", action="store_true")
    p.add_argument("--crash-after", type=int, default=0)
    p.add_argument("--serve", action="store_true")
    p.add_argument("--between", type=int, default=0, help="MiB the program takes after each bucket")
    a = p.parse_args()
    State.crash_after = a.crash_after
    install()
    if a.engine == "sglang":
        sglang([1, 2, 4, 8], 0.5)
    elif a.engine == "vllm":
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        runner = GPUModelRunner([1, 2, 4, 8], forward)
        runner.profile_cudagraph_memory()
        runner.capture_model(0.25)
    elif a.engine == "plain":
        for size in (8, 4, 2):
            forward(size)
    else:
        import plainlib

        for size in (8, 4, 2):
            plainlib.capture_size(size, forward)
            State.used += a.between * MIB  # the program's own work between its buckets
    if a.child:
        ctx = multiprocessing.get_context("spawn")
        proc = ctx.Process(target=child, args=(1,))
        proc.start()
        proc.join()
        if proc.exitcode:
            sys.exit(proc.exitcode)
    if a.serve:
        time.sleep(300)


if __name__ == "__main__":
    main()
