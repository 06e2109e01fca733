"""The graph-break point.

Models route every op that must run eagerly (the attention core) through
:func:`graph_break`. Outside a breakable capture it simply calls the op. Inside one,
the active engine ends the current graph segment, runs the op eagerly, records it
for replay, and starts the next segment.

Contract for ``fn``: it writes its results into tensors passed to it (allocated
before the break) and returns None, so nothing the break creates outlives it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable

_state = threading.local()


def graph_break(fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
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
