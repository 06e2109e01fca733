"""vLLM's model runner V2: one loop over the buckets' descriptors, each bucket's forward built by a
factory (create_forward_fn(desc, warmup)); FULL descriptors are captured here, PIECEWISE ones by
the forward itself."""

from dataclasses import dataclass

from vllm.v1.worker.gpu_model_runner import CUDAGraphMode


@dataclass(frozen=True)
class BatchExecutionDescriptor:
    cg_mode: CUDAGraphMode
    num_tokens: int
    num_reqs: int = 0


class CudaGraphManager:
    def __init__(self, descs):
        self.descs = descs

    def capture(self, create_forward_fn, progress_bar_desc="Capturing CUDA graphs"):
        for desc in self.descs:
            forward_fn = create_forward_fn(desc, warmup=True)
            forward_fn(CUDAGraphMode.NONE)  # the warm-up
            if desc.cg_mode == CUDAGraphMode.PIECEWISE:
                forward_fn(CUDAGraphMode.PIECEWISE)
            else:
                forward_fn = create_forward_fn(desc, warmup=False)
                forward_fn(CUDAGraphMode.FULL)


def profile_cudagraph_memory(runner):
    """V2's estimate: the whole capture, into a pool that is then freed."""
    return runner.capture_model()
