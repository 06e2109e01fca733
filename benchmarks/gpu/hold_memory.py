"""Hold device memory from another process so that a capture starts with a chosen free amount.

    python benchmarks/gpu/hold_memory.py TARGET_FREE_BYTES

Allocates until NVML reports TARGET_FREE_BYTES free (to one 2 MiB step), prints the free
bytes it reached as one line ``free <bytes>``, then holds the memory until stdin closes.
Allocations go through cudaMalloc of the caching allocator in segments above 10 MiB, so
each takes exactly its (2 MiB-rounded) size and nothing is cached on the side.
"""

import sys

import pynvml
import torch

STEP = 2 << 20


def free_now(handle) -> int:
    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).free)


def main() -> None:
    target = int(sys.argv[1])
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the context first: it takes memory of its own
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    held = []
    for _ in range(8):
        excess = free_now(handle) - target
        if excess < STEP:
            break
        # leave 64 MiB for a last exact step: a request under 10 MiB would take a 20 MiB segment
        size = excess - (64 << 20) if excess > (128 << 20) else excess
        size = max(STEP * 6, size // STEP * STEP)
        held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
    print(f"free {free_now(handle)}", flush=True)
    sys.stdin.read()  # hold until the caller closes stdin


if __name__ == "__main__":
    main()
