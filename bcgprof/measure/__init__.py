"""Measuring on a GPU: a capture run from options to a finished report (torch, CUDA, NVML).

:mod:`.runner` owns a run's life cycle (run.json, one fresh process per mode or rank); :mod:`.mode`
is the one mode loop (warm-up, capture, measure, verify); :mod:`.capture` captures one bucket list
and measures each bucket; :mod:`.memory` reads the allocator, the graph pool and NVML;
:mod:`.tracing` records the allocator's trace. Only ``bcgprof capture`` and the Python capture API
import this package.
"""
