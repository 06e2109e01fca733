"""Predicting a capture's cost without running it, and advising a bucket list: torch-free.

The modules, each with one job, from the traces up:

* the trace set, read and checked once: :mod:`.trace_set` (a mode's trace as columns),
  :mod:`.bucket_ops` (one bucket's events as the replay reads them), :mod:`.trace_cache` (what is
  learnt from a trace, kept by its content);
* the allocator model and its replay: :mod:`.allocator`, :mod:`.sources` (which trace each bucket of
  a list is replayed from; the profile's part, shared by its replayers), :mod:`.replay` (the
  replayer: placement, prefix tree and memo of its own), :mod:`.memo` (the prefix tree of lists
  replayed, the memo of bucket replays), :mod:`.fold` (repeated layers skipped, exactly),
  :mod:`.interpolate` (a bucket not profiled, from its neighbours), :mod:`.layout_spread`;
* the figures: :mod:`.prediction` (what a prediction is, its JSON contract), :mod:`.layers`
  (another layer count), :mod:`.lists` (another bucket list, from a traced profile),
  :mod:`.executables` and :mod:`.fit`, :mod:`.possible`, :mod:`.needs_free` (the free memory a
  capture needs: its one computation), :mod:`.bands` and :mod:`.calibrate` (the bands and their
  evidence, ``bands.json``);
* advice: :mod:`.advise`, :mod:`.search` (its search over candidate lists), :mod:`.padding`,
  :mod:`.programme`.

The package imports nothing itself: each caller imports the module it needs, so that ``show`` does
not load the replay.
"""
