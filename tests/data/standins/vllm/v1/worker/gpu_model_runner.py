import enum
from dataclasses import dataclass


class CUDAGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2


@dataclass
class BatchDescriptor:
    num_tokens: int
    uniform: bool = False


class GPUModelRunner:
    def __init__(self, sizes, forward):
        self.sizes = sizes
        self.forward = forward

    def _warmup_and_capture(
        self,
        desc,
        cudagraph_runtime_mode,
        profile_seq_lens=None,
        allow_microbatching=False,
        num_warmups=None,
        profiler=None,
    ):
        self.forward(desc.num_tokens)

    def profile_cudagraph_memory(self):
        for size in sorted(self.sizes)[:2]:
            self._warmup_and_capture(BatchDescriptor(size), CUDAGraphMode.PIECEWISE)
        self.forward(1)  # a graph outside any bucket of the estimate (numbered, not sized)
        print("INFO [gpu_model_runner.py:1] Estimated CUDA graph memory: 0.10 GiB total")

    def capture_model(self, logged_gib, encoder=None):
        for size in sorted(self.sizes, reverse=True):
            self._warmup_and_capture(BatchDescriptor(size, uniform=True), CUDAGraphMode.FULL)
        if encoder is not None:
            encoder.capture()
        print(f"Graph capturing finished in 1 secs, took {logged_gib:.2f} GiB", flush=True)
