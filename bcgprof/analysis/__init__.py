"""Everything bcgprof derives from reports, torch-free: compare, gate, predict, advise, explain,
estimate.

Pure functions over validated reports (:mod:`bcgprof.report`); :mod:`.predict` (a package)
predicts a capture's cost from reports, replaying a profile's recorded traces through a model of the
caching allocator, and advises a bucket list. Nothing here imports torch or the model,
capture or GPU code (``.importlinter``).
"""
