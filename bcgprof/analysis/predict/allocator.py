"""A model of PyTorch's CUDA caching allocator for one CUDA-graph private pool.

It follows ``c10/cuda/CUDACachingAllocator.cpp`` (class ``DeviceCachingAllocator``; the
functions named below are that file's), read in a recent main-branch version (the one with
``AcceleratorAllocatorConfig::large_segment_size`` and ``graph_capture_record_stream_reuse``, a
setting torch 2.11's snapshots list) and in an older one without memory pools (torch 2.1 era):
the rules modelled here are the same in both. ``tests/regression/test_allocator_real.py`` checks it
against every block address and segment of a real capture's history (the floor capture that
``reports/gpt-oss-20b-h200-snapshot`` keeps), and ``tests/gpu/test_replay_gpu.py`` against the torch
installed on a GPU machine.

The rules (default allocator settings; ``PYTORCH_CUDA_ALLOC_CONF`` empty):

* ``round_size``: a request becomes a multiple of 512 bytes (at least 512).
* ``get_pool``: rounded sizes up to 1 MiB live in the pool's small block pool, larger ones in
  its large block pool; the two never share a segment.
* ``get_allocation_size``: a new segment is 2 MiB for a small request, 20 MiB for a request
  under 10 MiB, else the request rounded up to 2 MiB.
* ``get_free_block``: best fit: the free block with the least ``(stream, size, address)``
  whose stream is the request's and whose size is at least the request's. With a
  ``max_split_size`` set, a block of at least that size is not given to a smaller request,
  and a request of at least that size takes no block more than ``max_non_split_rounding``
  larger than itself (both off by default: ``max_split_size`` unlimited).
* ``should_split`` / ``alloc_found_block``: a small block is split when at least 512 bytes
  would remain, a large one when more than 1 MiB would remain (and the request is under
  ``max_split_size``); the request takes the low addresses, the remainder stays free.
* ``free_block`` / ``try_merge_blocks``: a freed block merges with a free neighbour on
  either side (within its segment only) and returns to its free list.
* ``alloc_block``: when nothing fits, a new segment is allocated (``cudaMalloc``); a graph's
  private pool never returns a segment while a graph that uses it lives
  (``release_cached_blocks`` frees only pools no graph references), so pool bytes only grow.

What a capture adds: allocations made on a capturing stream come from the private pool
(``get_pool`` with ``captures_underway``); a block freed during the capture is reusable at
once by a later allocation of the same pool, unless it was used on another stream
(``recordStream``), in which case ``free`` defers it (``deferred_blocks`` /
``needs_events_deferred_until_no_capture``) until no capture is underway. The allocator's
trace records that moment as ``free_completed``; the replay frees a block there, so deferred
frees need no rule of their own.

Where a new segment lies (``cudaMalloc``'s address) is the driver's choice, and the traces record
it only for the profile's own run. It only breaks best-fit ties, yet a tie decided the other way
can change which blocks merge later and grow a pool by a whole block (docs/evidence-predict.md
names the lists where it did). A replay gives a segment the address the profile's allocator gave
the recorded one where that is free; otherwise above every segment so far (``below=False``, the
rule that reproduces every list captured from the full profiles) or below every segment
(``below=True``: the driver's addresses mostly descend, two in three of the committed traces'
graph-pool segments came below every earlier one). Predictions replay both and report where they
differ (:mod:`bcgprof.analysis.predict.replay`). Expandable segments and
``roundup_power2_divisions`` are not modelled (:func:`check_settings` refuses traces recorded with
them).

Invariants: every byte of every segment belongs to exactly one block; no two free blocks of
a segment are adjacent; :attr:`Pool.reserved` is the sum of the segment sizes and never
falls. Pure Python, no torch.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from random import Random
from typing import Optional

K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: every size is rounded to a multiple of it
K_SMALL_SIZE = 1 << 20  # kSmallSize: the largest "small" request
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: small requests are packed in 2 MiB segments
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer: requests under 10 MiB share 20 MiB segments
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
K_ROUND_LARGE = 2 << 20  # kRoundLarge: larger segments come in 2 MiB steps
UNLIMITED = 2**64 - 1  # max_split_size when unset (SIZE_MAX)
SEGMENT_GAP = 1 << 36  # spacing of made-up segment addresses (64 GiB: larger than any segment)
# below=True: the first made-up address lies below this (above any real address)
MADE_UP_START = 1 << 60
# a replay's events (:meth:`Pool.run`): (ALLOC, requested, stream, key, segment hint, recorded
# address) or (FREE, key)
ALLOC, FREE = 0, 1


class AllocatorError(ValueError):
    """A trace the model cannot follow (a free of an unknown block, settings it does not model)."""


@dataclass(frozen=True)
class Settings:
    """The allocator settings a trace was recorded with that change the pool's layout."""

    max_split_size: int = UNLIMITED
    max_non_split_rounding: int = K_LARGE_BUFFER
    large_segment_size: int = K_LARGE_BUFFER


def check_settings(settings: dict) -> Settings:
    """:class:`Settings` from a snapshot's ``allocator_settings``; refuses what is not modelled."""
    if settings.get("expandable_segments"):
        raise AllocatorError(
            "the capture ran with expandable_segments, which the allocator model does not follow"
        )
    divisions = settings.get("roundup_power2_divisions") or {}
    if any(int(v) > 1 for v in (divisions.values() if isinstance(divisions, dict) else divisions)):
        raise AllocatorError(
            "the capture ran with roundup_power2_divisions, which the allocator model does not "
            "follow"
        )
    split = int(settings.get("max_split_size", -1))
    return Settings(max_split_size=UNLIMITED if split < 0 else split)


def round_size(size: int) -> int:
    """``round_size``: the bytes a request of ``size`` takes (default settings)."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return -(-size // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE


def is_small(rounded: int) -> bool:
    """``get_pool``: whether a rounded size is served from the small block pool."""
    return rounded <= K_SMALL_SIZE


def allocation_size(rounded: int, settings: Settings = Settings()) -> int:
    """``get_allocation_size``: the size of the segment a new allocation of ``rounded`` bytes
    opens."""
    if rounded <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded < K_MIN_LARGE_ALLOC:
        return settings.large_segment_size
    return -(-rounded // K_ROUND_LARGE) * K_ROUND_LARGE


class Block:
    """A run of a segment's bytes: allocated, or free and listed in its pool's free list."""

    __slots__ = (
        "addr",
        "allocated",
        "free_list",
        "next",
        "prev",
        "segment",
        "size",
        "small",
        "stream",
    )

    def __init__(
        self, addr: int, size: int, segment: int, stream: int, small: bool, free_list: list
    ):
        self.addr = addr
        self.size = size
        self.segment = segment  # the segment's base address
        self.stream = stream
        self.small = small
        self.free_list = free_list  # its pool's free list of its (small, stream), when free
        self.allocated = False
        self.prev: Optional[Block] = None
        self.next: Optional[Block] = None

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else "free"
        return f"Block({self.addr:#x}, {self.size}, {state})"


class Pool:
    """One private pool: its segments, and free lists ordered like ``BlockComparatorSize``.

    A free list holds ``(size, address)`` pairs per ``(small, stream)`` (keyed by the number
    ``2 stream + small``); ordering by ``(stream, size, address)`` and taking the first entry of
    the request's stream at or above its size is ``get_free_block``'s ``lower_bound``.
    """

    def __init__(
        self, settings: Settings = Settings(), below: bool = False, shuffle: Optional[Random] = None
    ):
        self.settings = settings
        # where a segment without a usable recorded address goes (see the module's notes)
        self.below = below
        # set: every segment goes to a random free address (another process's layout)
        self.shuffle = shuffle
        self.segments: dict[int, int] = {}  # base address -> bytes
        # the segments' base addresses, sorted (a new segment's overlap test bisects)
        self._bases: list[int] = []
        self.reserved = 0
        self._free: dict[int, list[tuple[int, int]]] = {}  # 2 stream + small -> its free list
        self._blocks: dict[int, Block] = {}  # address -> block (every block of every segment)
        self._top = SEGMENT_GAP  # made-up addresses start above this
        # segments placed without a usable recorded address (``below`` decides where)
        self.made_up = 0

    # ------------------------------------------------------------ allocation

    def malloc(
        self, requested: int, stream: int = 0, at: Optional[int] = None
    ) -> tuple[Block, bool]:
        """Allocate ``requested`` bytes on ``stream``; returns the block and whether a segment was
        added.

        ``at``: the address to give a new segment, when one is needed and it overlaps none
        (a recorded address); otherwise the segment goes above every segment so far (below them all
        when the pool was made with ``below``).
        """
        reserved = self.reserved
        block = self.place(requested, stream, at)
        return block, self.reserved != reserved  # a segment adds its bytes

    def place(self, requested: int, stream: int = 0, at: Optional[int] = None) -> Block:
        """:meth:`malloc`'s block alone (one allocation of :meth:`run`)."""
        live: dict = {}
        self.run(((ALLOC, requested, stream, 0, at, None),), live)
        return self._blocks[live[0]]

    def _new_segment(self, size: int, small: bool, stream: int, at: Optional[int]) -> Block:
        # the recorded addresses were another layout's: any order can come
        if self.shuffle is not None:
            at = self.shuffle.randrange(1, 1 << 20) * SEGMENT_GAP
            while at in self.segments or self._overlaps(at, size):
                at = self.shuffle.randrange(1, 1 << 20) * SEGMENT_GAP
            self.made_up += 1
        elif at is None or at in self.segments or self._overlaps(at, size):
            self.made_up += 1
            if self.below:
                # segments never leave a graph pool
                lowest = self._bases[0] if self._bases else MADE_UP_START
                at = (lowest // SEGMENT_GAP - (-(-size // SEGMENT_GAP)) - 1) * SEGMENT_GAP
            else:
                at = self._top
        self._top = max(self._top, -(-(at + size) // SEGMENT_GAP) * SEGMENT_GAP + SEGMENT_GAP)
        self.segments[at] = size
        insort(self._bases, at)
        self.reserved += size
        block = Block(at, size, at, stream, small, self._free.setdefault(2 * stream + small, []))
        self._blocks[at] = block
        return block

    def _overlaps(self, addr: int, size: int) -> bool:
        """Whether ``[addr, addr + size)`` meets a segment: segments do not overlap, so their ends
        rise with their bases and only the last segment starting below ``addr + size`` can reach
        ``addr`` (O(log segments))."""
        i = bisect_left(self._bases, addr + size)
        return i > 0 and self._bases[i - 1] + self.segments[self._bases[i - 1]] > addr

    # ------------------------------------------------------------------ events

    def run(
        self,
        ops: Sequence,
        live: dict,
        check: bool = False,
        placed: Optional[list] = None,
        begin: int = 0,
        streams: Optional[Mapping[int, int]] = None,
    ) -> int:
        """Replay ``ops``, events ``(ALLOC, requested, stream, key, segment hint, recorded
        address)`` or ``(FREE, key)``: an allocation takes a block (``get_free_block``,
        ``round_size``, ``get_pool``, ``alloc_found_block``; a new segment at the hint when nothing
        fits, see :meth:`malloc`) and goes into ``live`` (key -> address); a free of a key in
        ``live`` returns its block (``free_block``: merged with free neighbours); a key not there
        belongs to a bucket left out of the list, and is passed over. One loop, no call per event
        (a replay's inner loop); a block let go by a merge is taken again by a later split of the
        same call. ``placed``: where each allocation went, by its index (``begin`` + its place in
        ``ops``); ``streams``: a request's stream as this pool names it. Returns, with ``check``,
        how many allocations went elsewhere than recorded (else 0)."""
        blocks, lists, new_segment = self._blocks, self._free, self._new_segment
        settings = self.settings
        limit, rounding = settings.max_split_size, settings.max_non_split_rounding
        unlimited = limit == UNLIMITED  # the default: every found block is taken, and may split
        # the loop's names, local
        alloc, unit, small_most = ALLOC, K_MIN_BLOCK_SIZE, K_SMALL_SIZE
        bisect, put, new_block = bisect_left, insort, Block
        pop = live.pop
        spare: list[Block] = []  # blocks merged away, taken again by splits
        mismatches = 0
        index = begin - 1
        for op in ops:
            index += 1
            if op[0] == alloc:
                _, requested, stream, key, hint, recorded = op
                if streams:
                    stream = streams.get(stream, stream)
                size = unit if requested < unit else -(-requested // unit) * unit
                small = size <= small_most
                block = None
                free = lists.get(2 * stream + small)
                if free:
                    i = bisect(free, (size, -1))
                    if i < len(free):
                        found, addr = free[i]
                        # an oversize block is kept for oversize requests
                        if unlimited or (
                            not (size < limit <= found)
                            and not (size >= limit and found >= size + rounding)
                        ):
                            del free[i]
                            block = blocks[addr]
                if block is None:
                    block = new_segment(allocation_size(size, settings), small, stream, hint)
                remaining = block.size - size
                if (
                    (remaining >= unit)
                    if small
                    else (remaining > small_most and (unlimited or size < limit))
                ):  # alloc_found_block: the request takes the low addresses
                    addr = block.addr + size
                    if spare:
                        rest = spare.pop()
                        rest.addr, rest.size, rest.segment = addr, remaining, block.segment
                        rest.stream, rest.small = block.stream, small
                        rest.free_list = block.free_list
                    else:
                        rest = new_block(
                            addr, remaining, block.segment, block.stream, small, block.free_list
                        )
                    after = block.next
                    rest.prev, rest.next = block, after
                    if after is not None:
                        after.prev = rest
                    block.next = rest
                    block.size = size
                    blocks[addr] = rest
                    put(block.free_list, (remaining, addr))
                block.allocated = True
                addr = live[key] = block.addr
                if check and addr != recorded:
                    mismatches += 1
                if placed is not None:
                    placed[index] = addr
                continue
            addr = pop(op[1], None)
            if addr is None:
                continue
            block = blocks.get(addr)
            if block is None:
                raise AllocatorError(f"no block starts at {addr:#x}")
            if not block.allocated:
                raise AllocatorError(f"block at {addr:#x} freed twice")
            block.allocated = False
            del blocks[addr]  # merging with the block before moves its start
            before, after = block.prev, block.next
            if before is not None and not before.allocated:  # [before block]
                free, entry = before.free_list, (before.size, before.addr)
                i = bisect(free, entry)
                if i == len(free) or free[i] != entry:
                    raise AllocatorError(f"free block at {before.addr:#x} is not in its free list")
                del free[i]
                del blocks[before.addr]
                block.addr = before.addr
                block.prev = before.prev
                if block.prev is not None:
                    block.prev.next = block
                block.size += before.size
                spare.append(before)
            if after is not None and not after.allocated:  # [block after]
                free, entry = after.free_list, (after.size, after.addr)
                i = bisect(free, entry)
                if i == len(free) or free[i] != entry:
                    raise AllocatorError(f"free block at {after.addr:#x} is not in its free list")
                del free[i]
                del blocks[after.addr]
                block.next = after.next
                if block.next is not None:
                    block.next.prev = block
                block.size += after.size
                spare.append(after)
            blocks[block.addr] = block
            put(block.free_list, (block.size, block.addr))
        for unused in spare:  # no longer linked to anything
            unused.prev = unused.next = None
        return mismatches

    # ------------------------------------------------------------------ free

    def free_at(self, addr: int) -> None:
        """Free the allocated block that starts at ``addr``."""
        self.run(((FREE, 0),), {0: addr})

    def free(self, block: Block) -> None:
        """``free_block``: return ``block`` to its free list, merged with free neighbours."""
        if not block.allocated:
            raise AllocatorError(f"block at {block.addr:#x} freed twice")
        self.free_at(block.addr)

    # ------------------------------------------------------------- reading

    def blocks(self) -> Iterator[Block]:
        """Every block, by address."""
        for addr in sorted(self._blocks):
            yield self._blocks[addr]

    def layout(self) -> tuple:
        """The free blocks, list by list (with the segments' total): equal layouts hold the same
        free space."""
        return self.reserved, tuple((k, tuple(v)) for k, v in sorted(self._free.items()) if v)

    def fingerprint(self) -> tuple:
        """Everything later decisions depend on: every block (address, bytes, in use, stream, small
        pool, its segment), where made-up addresses go next and how many were made up. Equal
        fingerprints make equal decisions."""
        blocks = self._blocks
        return (
            self._top,
            self.made_up,
            tuple(
                (a, b.size, b.allocated, b.stream, b.small, b.segment)
                for a, b in sorted(blocks.items())
            ),
        )

    @property
    def allocated(self) -> int:
        """Bytes of the blocks in use (rounded sizes, split remainders absorbed)."""
        return sum(b.size for b in self._blocks.values() if b.allocated)

    def clone(self) -> Pool:
        """An independent copy (same addresses, same free lists)."""
        twin = Pool(self.settings, self.below, self.shuffle)
        twin.segments = dict(self.segments)
        twin._bases = list(self._bases)
        twin.reserved = self.reserved
        twin._top = self._top
        twin.made_up = self.made_up
        twin._free = {k: list(v) for k, v in self._free.items()}
        copies = {}
        lists = twin._free
        for addr, b in self._blocks.items():
            free_list = lists.setdefault(2 * b.stream + b.small, [])
            c = Block(b.addr, b.size, b.segment, b.stream, b.small, free_list)
            c.allocated = b.allocated
            copies[addr] = c
        for addr, b in self._blocks.items():
            c = copies[addr]
            c.prev = copies[b.prev.addr] if b.prev is not None else None
            c.next = copies[b.next.addr] if b.next is not None else None
        twin._blocks = copies
        return twin
