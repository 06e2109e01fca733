"""Capture in a child process, as SGLang's scheduler does: the parent never touches the GPU (needs a GPU).

    bcgprof record --bucket loops:capture_one:size --out reports/recorded-child -- python examples/record/child_capture.py
"""

import multiprocessing

import loops


def child() -> None:
    loops.run([256, 512, 1024, 2048, 4096])


if __name__ == "__main__":
    proc = multiprocessing.get_context("spawn").Process(target=child)
    proc.start()
    proc.join()
    raise SystemExit(proc.exitcode)
