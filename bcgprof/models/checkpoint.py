"""Where a published checkpoint's tensors go in a built stack: :class:`CheckpointTarget`,
the record every module yields from ``checkpoint_entries`` and the loaders consume."""

from __future__ import annotations

from typing import NamedTuple


class CheckpointTarget(NamedTuple):
    """Where one tensor of a published checkpoint goes: ``param[index] = tensor[source]``.

    ``shape`` is always the published (unsharded) shape; ``source`` picks this
    tensor-parallel rank's part of it (``()``: all of it).
    """

    name: str  # checkpoint name, e.g. model.layers.0.self_attn.q_proj.weight
    param: str  # our parameter, e.g. layers.0.self_attn.qkv_proj.weight
    # index into the parameter; () for all of it. The name hides tuple.index, which nothing calls.
    index: tuple  # type: ignore[assignment]  # a field named like a tuple method; renaming it changes every loader
    shape: tuple  # the checkpoint tensor's shape (dequantised layout), unsharded
    source: tuple = ()  # index into the checkpoint tensor: this rank's shard; () for all of it
