"""The graph-break point, and side streams whose work a break or segment end joins.

Models route every op that must run eagerly (the attention core) through
:func:`graph_break`. Outside a breakable capture it simply calls the op. Inside one,
the active engine ends the current graph segment, runs the op eagerly, records it
for replay, and starts the next segment.

Contract for ``fn``: it writes its results into tensors passed to it (allocated
before the break) and returns None, so nothing the break creates outlives it.

Work forked with :func:`side_stream` is joined back into the current stream at the
next graph break, or when a capture segment ends, whichever comes first: a CUDA
graph capture cannot end while a forked stream still has unjoined work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

_state = threading.local()


def _pending() -> list:
    if not hasattr(_state, "pending"):
        _state.pending = []
    return _state.pending


def graph_break(fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    join_side_streams()
    handler = getattr(_state, "handler", None)
    if handler is None:
        fn(*args, **kwargs)
    else:
        handler(fn, args, kwargs)


@contextmanager
def break_handler(handler: Callable[[Callable[..., None], tuple, dict], None]):
    """Route graph_break calls on this thread to ``handler`` for the duration."""
    previous = getattr(_state, "handler", None)
    _state.handler = handler
    try:
        yield
    finally:
        _state.handler = previous


@contextmanager
def side_stream(stream: torch.cuda.Stream) -> Iterator[torch.cuda.Stream]:
    """Run the block on ``stream``, forked from the current stream's work so far.

    Its results may be read only after the next graph break (or an explicit
    :func:`join_side_streams`), which makes the current stream wait for it.
    """
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        yield stream
    _pending().append(stream)


def join_side_streams() -> None:
    """Make the current stream wait for every side stream forked since the last join."""
    pending = _pending()
    if pending:
        current = torch.cuda.current_stream()
        for s in pending:
            current.wait_stream(s)
        pending.clear()
