from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager
from vllm.v1.worker.gpu_model_runner import CUDAGraphMode


class GPUModelRunner:
    def __init__(self, manager: CudaGraphManager, forward):
        self.cudagraph_manager = manager
        self.forward = forward

    def capture_model(self, logged_gib=0.0):
        def create_forward_fn(desc, warmup):
            def forward_fn(cg_mode):
                if warmup or cg_mode != CUDAGraphMode.NONE:
                    self.forward(desc.num_tokens, graph=cg_mode != CUDAGraphMode.NONE)

            return forward_fn

        self.cudagraph_manager.capture(create_forward_fn)
        if logged_gib:
            print(f"Graph capturing finished in 1 secs, took {logged_gib:.2f} GiB", flush=True)
        return 0
