"""What a forward on the meta device runs and keeps alive (helpers only, no tests;
tests/models/conftest.py hands out the session's recorded forwards as the ``meta_forward_16k``
fixture).

* :class:`Watch` records the aten ops a forward runs: host synchronisations and value-dependent
  sizes (which a CUDA graph cannot hold), the ops, and the largest tensor created, with the ops of
  the attention core (which the breakable graph runs eagerly, between segments) kept apart.
* :class:`Live` counts the bytes of the storages created inside it, until they are freed, and
  their peak.
* :class:`MetaForwards` runs a preset's two-layer stack at 16384 tokens on the meta device once per
  (preset, MoE) under both, and keeps what they saw. A meta forward at that size is thousands of
  ops through torch's Python meta kernels; the tests of what the forward runs
  (tests/models/test_models_capture.py) and of its live peak (tests/models/test_moe_ogs.py) read
  the same forward instead of running it again. What a test reads is fixed when the forward ends
  (plain numbers and lists), so nothing a later test does changes it.
"""

from __future__ import annotations

import weakref
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bcgprof.bcg.breaks import break_handler
from bcgprof.models import build_meta
from bcgprof.models.args import ModelArgs

aten = torch.ops.aten

# ops that read a device value on the host or size their output by the values
HOST_SYNC = {
    aten._local_scalar_dense.default,  # .item(), bool(t), int(t), .tolist()
    aten.is_nonzero.default,
    aten.equal.default,
    aten.nonzero.default,
    aten.nonzero_static.default,  # static, but still not what we want here
    aten.bincount.default,
    aten.unique_consecutive.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.masked_select.default,
    aten.masked_scatter.default,
    aten._assert_async.default,
    aten._assert_async.msg,
    aten.histc.default,
    aten.repeat_interleave.Tensor,  # without output_size it syncs
}


class Watch(TorchDispatchMode):
    """Records ops and output sizes. While ``paused`` (the graph break running its op eagerly)
    the forbidden ops go to ``core_forbidden`` instead of ``forbidden``, and neither ``ops`` nor
    ``largest`` sees the op."""

    def __init__(self):
        super().__init__()
        self.paused = False
        self.forbidden: list[str] = []
        self.core_forbidden: list[str] = []
        self.largest = (0, None)
        self.ops: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        forbidden = self.core_forbidden if self.paused else self.forbidden
        if func in HOST_SYNC:
            forbidden.append(str(func))
        # boolean-mask indexing runs nonzero inside the kernel
        if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default) and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool
            for i in (args[1] or ())
            if i is not None
        ):
            forbidden.append(f"{func} with a boolean mask")
        if self.paused:
            return out
        self.ops.add(func)
        if func.is_view:  # a view allocates nothing
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.numel() > self.largest[0]:
                self.largest = (t.numel(), f"{func} {tuple(t.shape)}")
        return out


def run_watched(model, ids, pos, inner: TorchDispatchMode | None = None) -> Watch:
    """``model(ids, pos)`` without grad under a :class:`Watch` paused for the attention core
    (and under ``inner``, a mode inside the watch's, when given)."""
    watch = Watch()

    def eager_break(fn, args, kwargs):
        watch.paused = True
        try:
            fn(*args, **kwargs)
        finally:
            watch.paused = False

    with torch.no_grad(), break_handler(eager_break), watch, inner or nullcontext():
        model(ids, pos)
    return watch


class Live(TorchDispatchMode):
    """A CPU allocation counter: the bytes of every storage created inside it, until the storage
    is freed (a finalizer on its Python object, which lives as long as the storage does). Views and
    ops that write into tensors they are given (in place, ``out=``, ``set_``: Triton's interpreter
    wraps its arguments so) return storages that already exist and add nothing."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.created: list[tuple[tuple, torch.dtype]] = []
        self._seen: set[int] = set()

    def _freed(self, key: int, n: int) -> None:
        self._seen.discard(key)
        self.live -= n

    def mark(self) -> int:
        """Start a new peak from the bytes alive now; returns them."""
        self.peak = self.live
        return self.live

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func._schema.is_mutable:
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key, n = id(storage), storage.nbytes()
                if key not in self._seen and n:
                    self._seen.add(key)
                    self.live += n
                    self.peak = max(self.peak, self.live)
                    self.created.append((tuple(t.shape), t.dtype))
                    weakref.finalize(storage, self._freed, key, n)
        return out


TOKENS = 16384


@dataclass(frozen=True)
class MetaForward:
    """What one meta forward of a two-layer stack at :data:`TOKENS` tokens ran and kept alive."""

    args: ModelArgs
    hidden_size: int
    out_shape: tuple[int, ...]
    out_dtype: torch.dtype
    out_bytes: int  # the output's storage
    forbidden: list[str]  # host syncs outside the attention core
    core_forbidden: list[str]  # host syncs inside it
    largest: tuple[int, str | None]  # the largest tensor created outside the attention core
    peak_bytes: int  # the live bytes at their peak, the attention core's included
    live_bytes: int  # the live bytes when the forward returned, its output held


class MetaForwards:
    """``forwards(preset, moe)`` -> :class:`MetaForward` of ``build_meta(preset, num_layers=2,
    moe=moe)`` in bfloat16 (two layers: the second's input is held by the loop, as at any depth),
    run once."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, str], MetaForward] = {}

    def __call__(self, preset: str, moe: str = "fused-bf16") -> MetaForward:
        if (preset, moe) not in self._done:
            self._done[preset, moe] = self._run(preset, moe)
        return self._done[preset, moe]

    @staticmethod
    def _run(preset: str, moe: str) -> MetaForward:
        model = build_meta(preset, num_layers=2, moe=moe).to(torch.bfloat16)
        ids = torch.zeros(TOKENS, dtype=torch.long, device="meta")
        positions = torch.arange(TOKENS, device="meta")
        live = Live()
        out: list[torch.Tensor] = []
        watch = run_watched(lambda i, p: out.append(model(i, p)), ids, positions, live)
        (y,) = out
        return MetaForward(
            args=model.args,
            hidden_size=model.hidden_size,
            out_shape=tuple(y.shape),
            out_dtype=y.dtype,
            out_bytes=y.untyped_storage().nbytes(),
            forbidden=list(watch.forbidden),
            core_forbidden=list(watch.core_forbidden),
            largest=watch.largest,
            peak_bytes=live.peak,
            live_bytes=live.live,
        )
