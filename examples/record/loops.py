"""A plain CUDA-graph capture loop, as vLLM's FULL mode and SGLang's full backend capture: one graph per
size, largest first, every graph in one shared pool, two eager warm-ups before each capture."""

import time

import torch

HIDDEN = 4096


def build(layers: int = 8, repeat: int = 1) -> torch.nn.Module:
    """``layers`` blocks of two linears, run ``repeat`` times in a row (the same weights each time: a
    deeper capture, as long as an engine's, for the memory of ``layers``)."""
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(HIDDEN, 4 * HIDDEN, bias=False), torch.nn.GELU(),
                   torch.nn.Linear(4 * HIDDEN, HIDDEN, bias=False)]
    return torch.nn.Sequential(*blocks * repeat).to("cuda", torch.bfloat16).eval()


def capture_one(size, model, static, pool, stream, graphs):
    """Warm up twice on the capture stream, then capture the forward of the first ``size`` rows."""
    x = static[:size]
    with torch.cuda.stream(stream):
        for _ in range(2):
            model(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        out = model(x)
    graphs[size] = (graph, out)


def free_bytes() -> int:
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


@torch.inference_mode()
def run(sizes, repeat: int = 1) -> int:
    """Capture every size; print and return the free memory the capture loop took (before minus after)."""
    model = build(repeat=repeat)
    static = torch.randn(max(sizes), HIDDEN, device="cuda", dtype=torch.bfloat16)
    pool, stream, graphs = torch.cuda.graph_pool_handle(), torch.cuda.Stream(), {}
    before, started = free_bytes(), time.perf_counter()
    times = {}  # each capture_one's wall time, ms (the warm-ups queued, the graph captured)
    for size in sorted(sizes, reverse=True):
        t = time.perf_counter()
        capture_one(size, model, static, pool, stream, graphs)
        times[size] = (time.perf_counter() - t) * 1e3
    took, seconds = before - free_bytes(), time.perf_counter() - started
    for size, (graph, out) in graphs.items():  # the graphs replay as captured
        graph.replay()
        torch.testing.assert_close(out, model(static[:size]), rtol=0, atol=0)
    print(f"program: capture loop took {took} bytes of free memory in {seconds:.3f} s ({len(graphs)} graphs)",
          flush=True)
    print("program: ms a size " + " ".join(f"{size}:{ms:.2f}" for size, ms in times.items()), flush=True)
    return took
