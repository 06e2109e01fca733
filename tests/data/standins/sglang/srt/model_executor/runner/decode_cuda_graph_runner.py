from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.model_executor.runner.base import CudaGraphRunnerBase


class DecodeCudaGraphRunner(CudaGraphRunnerBase):
    def __init__(self, sizes, forward, model_runner=None):
        super().__init__(sizes, forward, model_runner)
        # a speculative target's decode runner captures its verify graphs
        speculative = getattr(model_runner, "speculative", False)
        self.capture_forward_mode = ForwardMode.TARGET_VERIFY if speculative else ForwardMode.DECODE

    def capture_one_shape(self, size, forward, stream_idx=None, variant_label=None):
        forward(size)
