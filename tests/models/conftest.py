"""Fixtures of the model tests: the session's meta forwards at 16384 tokens
(tests/models/meta_forward.py)."""

from __future__ import annotations

import pytest

from .meta_forward import MetaForwards


@pytest.fixture(scope="session")
def meta_forward_16k() -> MetaForwards:
    """meta_forward_16k(preset, moe="fused-bf16") -> what a two-layer stack's forward on the meta
    device at 16384 tokens ran and kept alive, run once a session."""
    return MetaForwards()
