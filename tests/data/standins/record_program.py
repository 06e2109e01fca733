"""A program for `bcgprof record`'s CPU tests: it captures through the engines' stand-ins with a
stand-in graph class (the shape of torch.cuda.CUDAGraph's capture API) and stand-in readings, so
every figure of its report is known: a capture of size S grows the pool and torch reserved by S MiB
and the device by S MiB plus 2 MiB of executable."""

import argparse
import multiprocessing
import os
import sys
import time
from types import SimpleNamespace

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


def forward(size, graph=True):
    """A capture of ``size`` (or, with ``graph=False``, a warm-up, which takes nothing)."""
    if not graph:
        return
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


def model_runner(draft=False, speculative=False, logged_gb=0.0):
    """SGLang's ModelRunner, as far as its graph capture reads it."""
    return SimpleNamespace(
        is_draft_worker=draft,
        speculative=speculative,
        logged_gb=logged_gb,
        prefill_runner=None,
        decode_runner=None,
    )


def sglang(sizes, logged_gb):
    from sglang.srt.model_executor.model_runner_components.cuda_graph_setup import (
        capture_cuda_graphs,
    )
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    target = model_runner(logged_gb=logged_gb)
    target.prefill_runner = PrefillCudaGraphRunner([16, 32], forward, target)
    target.decode_runner = DecodeCudaGraphRunner(sizes, forward, target)
    capture_cuda_graphs(model_runner=target)


def sglang_speculative(sizes, gap_s):
    """A speculative server: the target's runners (its decode runner captures verify graphs), then,
    once the draft model has loaded (``gap_s``), the draft worker's prefill runner and its EAGLE
    runner, which captures outside any phase function."""
    from sglang.srt.model_executor.model_runner_components.cuda_graph_setup import (
        capture_cuda_graphs,
    )
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
    from sglang.srt.model_executor.runner.mixed_cuda_graph_runner import MixedCudaGraphRunner
    from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner

    target = model_runner(speculative=True, logged_gb=0.25)
    target.prefill_runner = MixedCudaGraphRunner([16, 32], forward, target)
    target.decode_runner = DecodeCudaGraphRunner(sizes, forward, target)
    capture_cuda_graphs(model_runner=target)
    time.sleep(gap_s)
    draft = model_runner(draft=True, speculative=True)
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    draft.prefill_runner = PrefillCudaGraphRunner([64], forward, draft)
    capture_cuda_graphs(model_runner=draft, capture_decode_cuda_graph=False)
    EAGLEDraftCudaGraphRunner([1, 2], forward, draft).capture()


def vllm_v2(sizes, gap_s):
    """vLLM's model runner V2: the estimate (the whole capture, in a scope), the capture, and a
    draft model's graphs through a speculator's manager."""
    from vllm.v1.worker.gpu.cudagraph_utils import (
        BatchExecutionDescriptor,
        CudaGraphManager,
        profile_cudagraph_memory,
    )
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.spec_decode.cudagraph import PrefillSpeculatorCudaGraphManager
    from vllm.v1.worker.gpu_model_runner import CUDAGraphMode

    descs = [BatchExecutionDescriptor(CUDAGraphMode.PIECEWISE, 64)] + [
        BatchExecutionDescriptor(CUDAGraphMode.FULL, s) for s in sorted(sizes, reverse=True)
    ]
    runner = GPUModelRunner(CudaGraphManager(descs), forward)
    profile_cudagraph_memory(runner)
    time.sleep(gap_s)  # the KV cache is allocated from what the estimate left
    runner.capture_model(0.25)
    speculator = PrefillSpeculatorCudaGraphManager(
        [BatchExecutionDescriptor(CUDAGraphMode.FULL, s) for s in (4, 2)]
    )
    speculator.capture(forward)


def child(rank):
    os.environ["RANK"] = str(rank)
    install()
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    DecodeCudaGraphRunner([1, 2, 4, 8], forward, model_runner()).capture()


def main():
    p = argparse.ArgumentParser()
    p.add_argument(
        "--engine",
        choices=["sglang", "sglang-spec", "sglang-off", "vllm", "vllm-v2", "plain", "bucket"],
        default="sglang",
    )
    p.add_argument("--gap", type=float, default=0.0, help="seconds before a draft model's graphs")
    p.add_argument("--child", action="store_true")
    p.add_argument("--crash-after", type=int, default=0)
    p.add_argument("--serve", action="store_true")
    p.add_argument("--between", type=int, default=0, help="MiB the program takes after each bucket")
    a = p.parse_args()
    State.crash_after = a.crash_after
    install()
    if a.engine == "sglang":
        sglang([1, 2, 4, 8], 0.5)
    elif a.engine == "sglang-spec":
        sglang_speculative([1, 2, 4, 8], a.gap)
    elif a.engine == "vllm-v2":
        vllm_v2([1, 2, 4, 8], a.gap)
    elif a.engine == "vllm":
        from vllm.v1.worker.encoder_cudagraph import EncoderCudaGraphManager
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        runner = GPUModelRunner([1, 2, 4, 8], forward)
        runner.profile_cudagraph_memory()
        # an encoder of two paths: each token budget is captured twice (one row, the two summed)
        encoder = EncoderCudaGraphManager([128, 256], ["global", "local"], forward)
        runner.capture_model(0.25, encoder)
    elif a.engine == "sglang-off":  # a server with its CUDA graphs disabled: it captures nothing
        pass
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
        if a.engine.startswith("sglang"):
            print("[2026-12-07 10:00:00] The server is fired up and ready to roll!", flush=True)
        elif a.engine.startswith("vllm"):
            print("INFO [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000")
            sys.stdout.flush()
        time.sleep(300)


if __name__ == "__main__":
    main()
