class CudaGraphRunnerBase:
    def __init__(self, sizes, forward, model_runner=None):
        self.capture_bs = sizes
        self.forward = forward
        self.model_runner = model_runner

    def capture(self):
        for size in reversed(self.capture_bs):  # largest first, as SGLang's runners
            self.capture_one_shape(size, self.forward)

    def capture_one_shape(self, size, forward, stream_idx=None, variant_label=None):
        raise NotImplementedError
