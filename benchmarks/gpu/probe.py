"""Prints what this machine's torch/CUDA/NVML offer to bcgprof (run on the GPU box)."""
import time

import torch

from bcgprof.measure.device import DeviceMemory

print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
p = torch.cuda.get_device_properties(0)
print("uuid", getattr(p, "uuid", None), "pci", getattr(p, "pci_bus_id", None))

m = DeviceMemory(torch.device("cuda:0"))
print("memory source", m.source, m.reason, "used", m.used() >> 20, "MiB proc", m.process_used(), "driver", m.driver())
t = time.perf_counter()
n = 2000
for _ in range(n):
    m.used()
print("nvml used() cost us", (time.perf_counter() - t) / n * 1e6)
g = torch.cuda.CUDAGraph(keep_graph=True)
print("keep_graph ok; pool handle", torch.cuda.graph_pool_handle())
