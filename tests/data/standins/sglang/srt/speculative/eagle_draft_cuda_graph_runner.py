from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner


class EAGLEDraftCudaGraphRunner(DecodeCudaGraphRunner):
    def capture_one_shape(self, size, forward, stream_idx=None, variant_label=None):
        num_seqs = size  # EAGLE's name for it
        forward(num_seqs)
