def capture_cuda_graphs(
    *, model_runner, capture_decode_cuda_graph=True, finalize=True, defer_distributed_setup=False
):
    """A model runner's prefill runner, then its decode runner (a draft worker passes
    capture_decode_cuda_graph=False: its draft runners capture on their own, later)."""
    prefill = capture_prefill_graph(model_runner=model_runner)
    decode = capture_decode_graph(model_runner=model_runner) if capture_decode_cuda_graph else None
    return prefill, decode


def capture_prefill_graph(*, model_runner, eager_runner=None, force_for_draft_worker=False):
    runner = model_runner.prefill_runner
    if runner is not None:
        runner.capture()
    return runner


def capture_decode_graph(*, model_runner):
    runner = model_runner.decode_runner
    if runner is not None:
        runner.capture()
        print(
            f"Capture target decode CUDA graph end. elapsed=0.12 s, mem usage="
            f"{model_runner.logged_gb:.2f} GB, avail mem=70.00 GB.",
            flush=True,
        )
    return runner
