"""Capture a plain CUDA-graph loop over several sizes in one pool (needs a GPU).

    bcgprof record --bucket loops:capture_one:size --out reports/recorded-loop -- python examples/record/graph_loop.py
"""

import loops

if __name__ == "__main__":
    loops.run([256, 512, 1024, 2048, 4096])
