"""Measuring on a GPU: a capture run from options to a finished report (torch, CUDA, NVML).

:mod:`.runner` owns a run's life cycle (run.json, one fresh process per mode or rank); :mod:`.mode`
is the one mode loop (warm-up, capture, measure, verify); :mod:`.capture` captures one bucket list
and measures each bucket; :mod:`.memory` reads the allocator and the graph pool, :mod:`.device`
the device through NVML; :mod:`.tracing` records the allocator's trace. Only ``bcgprof capture``,
the Python capture API and ``bcgprof record``'s hook (its device readings) import this package.
"""
