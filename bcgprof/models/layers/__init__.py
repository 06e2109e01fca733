"""The building blocks of every family's layer stack: RMSNorm, RoPE, attention, the
dense MLP and the MoE dispatch (one module each).

Everything here is written for prefill with no KV cache: a forward sees T tokens, the
token ids ``[T]`` and their positions ``[T]``, and produces ``[T, hidden]``.

Capture rules the forward obeys (a breakable CUDA graph records everything but the
attention core): static shapes for a given T, no host synchronisation (no ``.item()``,
``nonzero``, boolean indexing, data-dependent Python branches, ``bincount``), no
allocation whose size depends on tensor values. The attention core runs eagerly behind
:func:`bcgprof.bcg.breaks.graph_break`; it may do anything, but writes into an output
tensor allocated before the break.
"""
