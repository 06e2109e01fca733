"""Graph breaks run once per distinct call, then repeated by their allocator requests.

A breakable forward leaves its eager op (the attention core) to
:func:`bcgprof.bcg.breaks.graph_break` once per layer, and every layer of a kind calls it with the
same shapes: gpt-oss-20b alternates a sliding-window and a full layer, so its 24 calls at one bucket
are two distinct calls, twelve times each. That op writes into tensors it is given and frees
everything it allocates, so what it does to the allocator is a fixed sequence of requests per
distinct call; and it is most of the eager forward's GPU time (``benchmarks/process_costs.py`` times
it call by call).

:class:`BreakRepeater` is a break handler for a bucket's warm-up runs and its capture: the first
call with a given signature (the op, and each argument's shape, strides, offset, dtype, device and
address alignment, or its value) runs for real while the allocator history is recorded, and every
later call with that signature makes the same requests again without launching a kernel
(:func:`bcgprof.measure.warmup_repeat.plan_repeat`), which leaves the allocator, and so every memory
figure, as the real call would. A call the history cannot repeat exactly, or whose signature it
cannot read, always runs for real. What the repeated calls skip is the attention's values: the
layers after them compute on whatever the output buffer held, which no allocation depends on (a
captured forward cannot size anything by its data). Graph replays, the pre-warm and the replay
check run every break for real.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch

from bcgprof.measure.warmup_repeat import NOTHING, RepeatPlan, plan_repeat, repeat_run

ALIGNMENT = 256  # kernels may choose their path (and their scratch) by an address's alignment


def _signature(value: Any) -> Any:
    """What the allocator requests of a call may depend on, for one argument; raises TypeError for
    an argument it cannot describe."""
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            tuple(value.shape),
            value.stride(),
            value.storage_offset(),
            value.dtype,
            value.device,
            value.data_ptr() % ALIGNMENT,
        )
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_signature(v) for v in value))
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return value
    raise TypeError(f"no signature for {type(value).__name__}")


def call_signature(fn: Callable[..., None], args: tuple, kwargs: dict) -> Optional[tuple]:
    """The signature of one break call, or None when an argument has none (that call always
    runs)."""
    try:
        return (fn, _signature(args), tuple((k, _signature(v)) for k, v in sorted(kwargs.items())))
    except TypeError:
        return None


class BreakRepeater:
    """A break handler: the first call of each signature runs, later ones repeat its requests.

    ``count_allocations()`` is the allocator's running count of allocations; ``history()`` the
    recorded entries so far (the trace recorder's ``peek``); ``streams`` the raw handles a request
    may name; ``allocate(size, stream)`` returns a block of ``size`` bytes requested on ``stream``.
    """

    def __init__(
        self,
        count_allocations: Callable[[], int],
        history: Callable[[], list],
        streams: Callable[[], list[int]],
        allocate: Callable[[int, int], Any],
    ):
        self.count_allocations = count_allocations
        self.history = history
        self.streams = streams
        self.allocate = allocate
        self.plans: dict[
            tuple, Optional[RepeatPlan]
        ] = {}  # signature -> plan (None: cannot be repeated)
        self.run = 0  # calls run for real
        self.repeated = 0  # calls made by their requests alone

    def __call__(self, fn: Callable[..., None], args: tuple, kwargs: dict) -> None:
        key = call_signature(fn, args, kwargs)
        if key is None or key in self.plans:
            plan = self.plans.get(key) if key is not None else None
            if plan is None:  # an argument without a signature, or a call its history cannot repeat
                self._run(fn, args, kwargs)
            else:
                repeat_run(plan, self.allocate)
                self.repeated += 1
            return
        # a new signature: run it, and plan its repeats from the history
        before = self.count_allocations()
        self._run(fn, args, kwargs)
        made = self.count_allocations() - before
        self.plans[key] = (
            NOTHING if made == 0 else plan_repeat(self.history(), made, None, 0, self.streams())
        )

    def _run(self, fn: Callable[..., None], args: tuple, kwargs: dict) -> None:
        fn(*args, **kwargs)
        self.run += 1
