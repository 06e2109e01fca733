"""What a replayer remembers of the lists it replayed, so that it replays each event once.

* :class:`PrefixTree`: the lists replayed (capture order, largest first) as a tree of their
  prefixes, each node with the pool after its last bucket; the replay state itself is kept where
  a list ends and where a later list leaves an earlier one's path (at most :data:`CACHE_STATES`,
  least recently used dropped). A list that shares leading buckets with one replayed before
  replays only the buckets after the shared part.
* :class:`Memo`: a bucket replayed from a small state (at most :data:`MEMO_BLOCKS` blocks) is
  remembered by the state's content (pool fingerprint, live blocks), so the same bucket from a
  state of the same content is looked up instead of replayed. States found that way share the
  memo's copy until they change (:meth:`State.own`).

Invariant: what either gives back is what replaying would give (a kept state is never changed in
place; numbers for contents are never reused). Cost: a dict lookup per bucket and per prefix
node; memory bounded by :data:`CACHE_STATES` states and :data:`MEMO_STATES` remembered replays.
Torch-free.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from bcgprof.analysis.predict.allocator import Pool

CACHE_STATES = 256  # replay states kept (each holds a pool's blocks)
# a state of at most this many blocks is looked up by its content before a bucket is replayed
MEMO_BLOCKS = 64
MEMO_STATES = 8192  # bucket replays remembered that way


@dataclass
class State:
    pool: Pool
    live: dict  # event key -> block address
    at: dict  # trace mode -> position of its last replayed bucket
    reserved: list  # pool bytes after each bucket so far
    mismatches: int = 0
    # the number of its content in the memo, when known and small
    content: Optional[int] = None
    borrowed: bool = False  # pool and live belong to the memo: copy them before changing them

    def clone(self) -> State:
        return State(
            self.pool.clone(),
            dict(self.live),
            dict(self.at),
            list(self.reserved),
            self.mismatches,
            self.content,
        )

    def own(self) -> None:
        """Copy what the memo lent, before a change."""
        if self.borrowed:
            self.pool, self.live, self.borrowed = self.pool.clone(), dict(self.live), False
        self.content = None


class Node:
    """A prefix of the lists replayed: the pool after its last bucket, and the state there when
    kept."""

    __slots__ = ("children", "reserved", "state")

    def __init__(self, reserved: int = 0):
        self.children: dict = {}
        self.reserved = reserved
        self.state: Optional[State] = None


class PrefixTree:
    """The lists one replayer replayed, per (mode, check), and the states kept along them."""

    def __init__(self) -> None:
        self.roots: dict[tuple[str, bool], Node] = {}
        self.states: OrderedDict = OrderedDict()  # nodes holding a state, least recently used first
        self.stopped = 0  # the pool where the last replay with a limit went above it
        self.reached: list[int] = []  # and the pool after each of its buckets up to there

    def root(self, mode: str, check: bool) -> Node:
        return self.roots.setdefault((mode, check), Node())

    def touch(self, node: Node) -> None:
        """Mark ``node``'s state as just used."""
        self.states.move_to_end(node)

    def keep(self, node: Node, state: State) -> None:
        """Keep ``state`` at ``node``, dropping the least recently used beyond the limit."""
        node.state = state
        self.states[node] = None
        self.states.move_to_end(node)
        while len(self.states) > CACHE_STATES:
            old, _ = self.states.popitem(last=False)
            old.state = None

    def known_pool(self, mode: str, plan: list) -> int:
        """The pool after the longest prefix of ``plan`` replayed without ``check`` (0 if none)."""
        node, reserved = self.roots.get((mode, False)), 0
        for key in plan:
            node = node.children.get(key) if node is not None else None
            if node is None:
                break
            reserved = node.reserved
        return reserved


class Memo:
    """Bucket replays from small states, by the state's content."""

    def __init__(self) -> None:
        # (bucket, source, small state's content, ...) -> (pool, live, content) after it
        self.after: dict = {}
        self.contents: dict = {}  # small state's content -> its number
        self.numbered = 0  # numbers given so far
        # buckets not replayed because the same bucket was replayed from the same state
        self.hits = 0

    def content(self, state: State, check: bool) -> Optional[int]:
        """A number for the state's content (its pool's fingerprint and live blocks), if it is small
        enough to be worth looking up; None otherwise."""
        if check or len(state.pool._blocks) > MEMO_BLOCKS:
            return None
        key = (state.pool.fingerprint(), tuple(sorted(state.live.items())))
        number = self.contents.get(key)
        if number is None:
            if len(self.contents) >= MEMO_STATES:
                # numbers are never reused: states holding old ones stay right
                self.contents.clear()
                self.after.clear()
            number = self.contents[key] = self.numbered
            self.numbered += 1
        return number

    def remember(self, key: tuple, state: State, check: bool) -> None:
        """Remember ``state`` as what replaying ``key``'s bucket gave; sets its content."""
        if len(self.after) >= MEMO_STATES:
            self.after.clear()
        state.content = self.content(state, check)
        self.after[key] = (state.pool.clone(), dict(state.live), state.content)
