from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner


class MixedCudaGraphRunner(PrefillCudaGraphRunner):
    def capture_one_shape(self, size, *, prefix_num_chunks=0):
        self.forward(size)
