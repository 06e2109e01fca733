from sglang.srt.model_executor.runner.base import CudaGraphRunnerBase


class PrefillCudaGraphRunner(CudaGraphRunnerBase):
    def capture(self):
        for num_tokens in reversed(self.capture_bs):
            self.capture_one_shape(num_tokens)

    def capture_one_shape(self, size, *, prefix_num_chunks=0):
        self.forward(size)  # a prefill runner's segments: one capture per segment
        self.forward(size)
