from sglang.srt.model_executor.runner.base import CudaGraphRunnerBase


class DecodeCudaGraphRunner(CudaGraphRunnerBase):
    def capture_one_shape(self, size, forward, stream_idx=None, variant_label=None):
        forward(size)
