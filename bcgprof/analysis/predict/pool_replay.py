"""What a replay of one mode's bucket list gives: :class:`PoolReplay` (the pool after each bucket
and what it rests on). A plain record shared by the replayer, the sources that verify a profile
with it, and the phases replayed into one pool. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PoolReplay:
    """The replayed pool of one mode's list: bytes after each bucket (capture order) and what it
    rests on."""

    mode: str
    buckets: list[int]
    pool_bytes: list[int]
    exact: bool  # every graph-pool event of every bucket replayed (incomplete traces are refused)
    sources: list[str]  # the trace each bucket's events came from
    mismatches: int = 0  # with check: allocations placed elsewhere than recorded
    # segments placed without a usable recorded address (0: the other placement is the same)
    made_up: int = 0
    # the replay state after each bucket, where the replay kept them (the check of a trace does,
    # for the replayers of its report to start from): memo.State, never changed once kept
    states: list = field(default_factory=list, repr=False, compare=False)
