"""Capture a plain CUDA-graph loop over several sizes in one pool (needs a GPU). An optional argument
gives the number of sizes (multiples of 256 tokens, default 5: 256 to 4096 in doublings); a second,
how many times the model's layers run in a row (default 1: about 25 ms a graph on an H100).

    bcgprof record --bucket loops:capture_one:size --out reports/recorded-loop -- python examples/record/graph_loop.py
"""

import sys

import loops

if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    loops.run([256 * k for k in range(1, count + 1)] if count else [256, 512, 1024, 2048, 4096], repeat)
