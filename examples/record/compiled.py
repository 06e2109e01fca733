"""torch.compile(mode="reduce-overhead") over several batch sizes: cudagraph trees record one graph per
shape (needs a GPU).

    bcgprof record --out reports/recorded-compiled -- python examples/record/compiled.py
"""

import torch

import loops

if __name__ == "__main__":
    model = loops.build(layers=4)
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    sizes = [64, 128, 256, 512]
    inputs = {s: torch.randn(s, loops.HIDDEN, device="cuda", dtype=torch.bfloat16) for s in sizes}
    before = loops.free_bytes()
    with torch.inference_mode():
        for size in sorted(sizes, reverse=True):
            for _ in range(3):  # warm-up, then the recording, then a replay
                out = compiled(inputs[size])
            torch.testing.assert_close(out, model(inputs[size]), rtol=2e-2, atol=2e-2)
    took = before - loops.free_bytes()
    print(f"program: compile and capture took {took} bytes of free memory ({len(sizes)} shapes)", flush=True)
