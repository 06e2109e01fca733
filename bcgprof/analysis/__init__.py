"""Everything bcgprof derives from reports, torch-free: compare, gate, predict, advise, explain, estimate.

Pure functions over validated reports (:mod:`bcgprof.report`); the allocator model and its replay
(:mod:`.allocator`, :mod:`.replay`) predict other bucket lists from a profile's recorded traces, and
:mod:`.bands` holds the evidence behind every prediction band. Nothing here imports torch or the model,
capture or GPU code (``.importlinter``).
"""
