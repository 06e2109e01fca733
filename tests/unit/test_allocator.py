"""The caching-allocator model on sequences worked out by hand from the rules of
``c10/cuda/CUDACachingAllocator.cpp`` (rounding, segment sizes, splitting, best fit, merging)."""

from __future__ import annotations

import pytest

from bcgprof.analysis.predict.allocator import (
    K_LARGE_BUFFER,
    K_SMALL_BUFFER,
    AllocatorError,
    Pool,
    Settings,
    allocation_size,
    check_settings,
    is_small,
    round_size,
)

KIB, MIB = 1 << 10, 1 << 20


def test_requests_round_to_512_bytes_and_split_into_small_and_large_at_1_mib():
    assert [round_size(n) for n in (1, 511, 512, 513, 1024, 1000 * KIB + 1)] == [
        512,
        512,
        512,
        1024,
        1024,
        1000 * KIB + 512,
    ]
    assert is_small(MIB) and not is_small(MIB + 512)


def test_segment_sizes_are_2_mib_20_mib_or_the_request_in_2_mib_steps():
    assert allocation_size(512) == allocation_size(MIB) == 2 * MIB
    assert allocation_size(MIB + 512) == allocation_size(10 * MIB - 512) == 20 * MIB
    assert allocation_size(10 * MIB) == 10 * MIB
    assert allocation_size(10 * MIB + 512) == 12 * MIB


def test_small_requests_pack_into_one_2_mib_segment_and_merge_back():
    pool = Pool()
    a, grew_a = pool.malloc(1000)
    b, grew_b = pool.malloc(3000)
    assert grew_a and not grew_b and pool.reserved == K_SMALL_BUFFER
    assert b.addr == a.addr + 1024  # 1000 rounds to 1024; the remainder of the segment follows
    assert (a.size, b.size) == (1024, 3072)
    pool.free(a)
    pool.free(b)
    blocks = list(pool.blocks())
    assert len(blocks) == 1 and blocks[0].size == 2 * MIB and not blocks[0].allocated


def test_a_large_block_splits_only_when_more_than_1_mib_would_remain():
    pool = Pool()
    a, _ = pool.malloc(3 * MIB)  # a new 20 MiB segment, split: 17 MiB stay free
    assert pool.reserved == K_LARGE_BUFFER and a.size == 3 * MIB
    # 17 MiB free: 1 MiB - 512 would remain, too little to split
    b, grew = pool.malloc(16 * MIB + 512)
    assert not grew and b.size == 17 * MIB and b.addr == a.addr + 3 * MIB
    assert pool.allocated == 20 * MIB
    small_rest = Pool()
    # small? no: a 20 MiB segment; 18 MiB + 512 remain and split off
    c, _ = small_rest.malloc(2 * MIB - 512)
    assert c.size == 2 * MIB - 512 and small_rest.reserved == 20 * MIB


def _carve(pool: Pool, sizes: list[int]) -> list:
    """Blocks of ``sizes`` MiB side by side in one segment, in address order."""
    blocks = [pool.malloc(s * MIB)[0] for s in sizes]
    assert len(pool.segments) == 1
    return blocks


def test_best_fit_takes_the_smallest_free_block_that_fits_then_the_lowest_address():
    pool = Pool()
    pool.malloc(60 * MIB)  # one 60 MiB segment ...
    pool.free(next(pool.blocks()))
    blocks = _carve(pool, [8, 2, 6, 2, 6, 2, 4, 2])  # ... carved, with 28 MiB left at the end
    for i in (0, 2, 4, 6):
        pool.free(blocks[i])  # free 8, 6, 6, 4 MiB, separated by live 2 MiB blocks
    got, grew = pool.malloc(5 * MIB)
    # the first 6 MiB block, not the 8 MiB one nor the second 6
    assert not grew and got.addr == blocks[2].addr
    assert got.size == 6 * MIB  # 1 MiB would remain: not split
    again, _ = pool.malloc(5 * MIB)
    assert again.addr == blocks[4].addr


def test_a_freed_block_merges_with_free_neighbours_on_both_sides():
    pool = Pool()
    a, b, c, rest = (pool.malloc(s * MIB)[0] for s in (4, 4, 4, 8))  # 20 MiB segment: 4 + 4 + 4 + 8
    pool.free(a)
    pool.free(c)
    pool.free(b)  # joins a and c into one 12 MiB block
    free = [blk for blk in pool.blocks() if not blk.allocated]
    assert [(blk.addr - a.addr, blk.size) for blk in free] == [(0, 12 * MIB)]
    assert rest.allocated


def test_a_new_segment_when_free_space_is_fragmented():
    pool = Pool()
    # a 20 MiB segment, four 5 MiB blocks
    a, _b, c, _d = (pool.malloc(5 * MIB)[0] for _ in range(4))
    pool.free(a)
    pool.free(c)  # 10 MiB free in all, in two pieces
    big, grew = pool.malloc(9 * MIB)
    assert grew and pool.reserved == 40 * MIB and big.segment != a.segment


def test_blocks_free_on_one_stream_do_not_serve_another():
    pool = Pool()
    a, _ = pool.malloc(4 * MIB, stream=1)
    pool.free(a)
    b, grew = pool.malloc(4 * MIB, stream=0)
    assert grew and b.segment != a.segment


def test_max_split_size_keeps_oversize_blocks_for_oversize_requests():
    pool = Pool(Settings(max_split_size=8 * MIB))
    a, _ = pool.malloc(12 * MIB)
    pool.free(a)
    # under max_split_size: the 12 MiB oversize block is not handed out
    _b, grew = pool.malloc(4 * MIB)
    assert grew
    c, grew = pool.malloc(11 * MIB)  # oversize, within 20 MiB of the block: takes it whole, unsplit
    assert not grew and c.addr == a.addr and c.size == 12 * MIB


def test_settings_the_model_does_not_follow_are_refused():
    assert check_settings({"max_split_size": -1}).max_split_size > 2**60
    with pytest.raises(AllocatorError, match="expandable_segments"):
        check_settings({"expandable_segments": True})
    with pytest.raises(AllocatorError, match="roundup_power2_divisions"):
        check_settings({"roundup_power2_divisions": {"1": 0, "2": 4}})


def test_a_clone_is_independent_and_a_double_free_is_refused():
    pool = Pool()
    a, _ = pool.malloc(3 * MIB)
    twin = pool.clone()
    pool.free(a)
    assert twin.allocated == 3 * MIB and pool.allocated == 0
    with pytest.raises(AllocatorError, match="freed twice"):
        pool.free(a)
    twin.free_at(a.addr)
    assert twin.allocated == 0


def test_a_recorded_address_is_used_for_a_new_segment_unless_it_overlaps():
    pool = Pool()
    a, _ = pool.malloc(3 * MIB, at=1 << 40)
    assert a.segment == 1 << 40
    b, _ = pool.malloc(19 * MIB, at=(1 << 40) + MIB)  # overlaps the first: placed above it
    assert b.segment >= (1 << 40) + 20 * MIB


@pytest.mark.parametrize("seed", range(6))
def test_running_events_in_one_loop_makes_the_decisions_of_place_and_free_at(seed: int):
    """``Pool.run``, the replay's inner loop, against the same events stepped one method call at a
    time: the same blocks, addresses, free lists and segments, under a split limit too; and an
    allocation counted as misplaced exactly when it lands elsewhere than the address given."""
    from random import Random

    from bcgprof.analysis.predict.allocator import ALLOC, FREE

    rng = Random(seed)
    settings = Settings(max_split_size=8 * MIB) if seed % 2 else Settings()
    ops, live_keys, key = [], [], 0
    for _ in range(3000):
        if live_keys and rng.random() < 0.45:
            ops.append((FREE, live_keys.pop(rng.randrange(len(live_keys)))))
        else:
            key += 1
            size = rng.choice(
                [rng.randrange(1, 4096), rng.randrange(1, 2 * MIB), 3 * MIB, 12 * MIB]
            )
            hint = rng.choice([None, (1 << 40) + rng.randrange(64) * 32 * MIB])
            ops.append((ALLOC, size, rng.randrange(2), key, hint, rng.choice([0, 1 << 40])))
            live_keys.append(key)
    ops.append((FREE, 10**9))  # a key never allocated: passed over, as a list's left-out bucket
    stepped, live = Pool(settings), {}
    misplaced, addresses = 0, []
    for op in ops:
        if op[0] == ALLOC:
            addr = live[op[3]] = stepped.place(op[1], op[2], op[4]).addr
            misplaced += addr != op[5]
            addresses.append(addr)
        elif op[1] in live:
            stepped.free_at(live.pop(op[1]))
    run, run_live, placed = Pool(settings), {}, [-1] * len(ops)
    assert run.run(ops, run_live, True, placed) == misplaced
    assert run.fingerprint() == stepped.fingerprint() and run.layout() == stepped.layout()
    assert run_live == live and run.reserved == stepped.reserved
    assert [p for p, op in zip(placed, ops) if op[0] == ALLOC] == addresses
    assert all(p == -1 for p, op in zip(placed, ops) if op[0] == FREE)
    streams = {0: 7, 1: 9}  # a pool whose requests name other streams
    renamed, renamed_live = Pool(settings), {}
    renamed.run(ops, renamed_live, streams=streams)
    expected, expected_live = Pool(settings), {}
    expected.run(
        [(o[0], o[1], streams[o[2]], *o[3:]) if o[0] == ALLOC else o for o in ops], expected_live
    )
    assert renamed.fingerprint() == expected.fingerprint() and renamed_live == expected_live
