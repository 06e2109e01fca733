"""Recording another program's CUDA-graph captures from inside its processes (``bcgprof record``).

:mod:`.session` runs the program with :mod:`.site`'s ``sitecustomize`` first on ``PYTHONPATH``, so
every Python process it starts, children and ranks included, loads the hook; :mod:`.hook`, loaded
only once the program imports torch, patches ``torch.cuda.CUDAGraph`` and the bucket functions the
:mod:`.adapters` table names, and appends one line per bucket to a file of its own process
(:mod:`.rows`), and with ``--trace`` writes each group's allocator trace (:mod:`.history`); the
session merges those lines into a report as they arrive (:mod:`.merge`) and reads the engines' own
capture-memory log lines (:mod:`.logs`).
"""
