"""A torch.distributed program under torchrun: each rank captures the loop (needs a GPU).

    bcgprof record --bucket loops:capture_one:size --out reports/recorded-torchrun -- \\
        torchrun --nproc-per-node 1 examples/record/torchrun_capture.py
"""

import os

import torch
import torch.distributed as dist

import loops

if __name__ == "__main__":
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    loops.run([256, 512, 1024, 2048, 4096])
    dist.barrier()
    dist.destroy_process_group()
