from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager


class PrefillSpeculatorCudaGraphManager(CudaGraphManager):
    """A draft model's graphs: its own capture, which hands the base loop a factory."""

    def capture(self, forward_fn, attn_states=None, progress_bar_desc="Capturing CUDA graphs"):
        def create_forward_fn(desc, warmup):
            return lambda cg_mode: forward_fn(desc.num_tokens, graph=cg_mode.name != "NONE")

        super().capture(create_forward_fn, progress_bar_desc)
