"""How the advisor's work grows with the number of profiled buckets, counted (bucket replays and
allocator events), not timed: on the synthetic traced profile (tests/traced_profile.py) doubling the
buckets at a fixed margin above the largest bucket at most triples the replays, where the search
that predicted every candidate list from scratch grew by 4 to 6 times (benchmarks/advise_scaling.py
times it on up to 4,096 buckets). The programme behind the candidates is checked against the
O(n^2 * units) table it replaces."""

from __future__ import annotations

import numpy as np
import pytest

import bcgprof.analysis.predict.replay as replay
from bcgprof.analysis.predict.advise import advise
from bcgprof.analysis.predict.lists import predict_buckets
from bcgprof.analysis.predict.programme import hull_programme, table_programme

MIB = 1 << 20
MARGIN = 64 * MIB  # above the largest bucket alone: the same budget margin at every size
GROWTH = 3.0  # at most this much more work for twice the buckets


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    from traced_profile import write_profile

    root = tmp_path_factory.mktemp("scaling")
    return {
        n: write_profile(
            root / f"p{n}",
            [16 * (i + 1) for i in range(n)],
            ("per-bucket", "shared", "shared-largest"),
        )
        for n in (32, 64)
    }


def _work(report, mode: str, monkeypatch) -> tuple[int, int]:
    """(buckets replayed, allocator events replayed) by one advise call, counted at the replay's
    step."""
    counted = [0, 0]
    step = replay.Replayer._step

    def counting(self, state, bucket, source, check):
        counted[0] += 1
        counted[1] += len(self.bucket_sources.ops[source][bucket].ops)
        return step(self, state, bucket, source, check)

    largest = max(report.run.buckets)
    alone = predict_buckets(report, [largest], [mode]).mode(mode).high_bytes
    with monkeypatch.context() as patched:
        patched.setattr(replay.Replayer, "_step", counting)
        advice = advise(report, alone + MARGIN, mode=mode)
    assert advice.high_bytes <= alone + MARGIN and largest in advice.buckets
    return counted[0], counted[1]


@pytest.mark.parametrize("mode", ["per-bucket", "shared-largest", "shared"])
def test_twice_the_buckets_at_most_triples_the_replays(profiles, mode, monkeypatch):
    small, large = _work(profiles[32], mode, monkeypatch), _work(profiles[64], mode, monkeypatch)
    assert large[0] <= GROWTH * small[0], (mode, small, large)
    assert large[1] <= GROWTH * small[1], (mode, small, large)


def test_the_hull_programme_is_the_table_on_integer_weights():
    """Same least paddings and the same back-pointers (ties to the earliest bucket), zero weights
    and zero costs included."""
    rng = np.random.default_rng(7)
    for _ in range(150):
        n = int(rng.integers(1, 12))
        cand = sorted(rng.choice(np.arange(1, 100), size=n, replace=False).tolist())
        costs = rng.integers(0, 6, size=n).tolist()
        costs[-1] = 0
        weights = np.zeros(cand[-1] + 1)
        weights[1:] = rng.integers(0, 4, size=cand[-1]) * (rng.random(cand[-1]) < 0.5)
        units = int(rng.integers(0, 20))
        table, hull = (
            table_programme(cand, costs, units, weights),
            hull_programme(cand, costs, units, weights),
        )
        assert np.array_equal(table[0], hull[0]) and np.array_equal(table[1], hull[1]), (
            cand,
            costs,
            units,
        )


@pytest.mark.parametrize("mode", ["per-bucket", "shared-largest", "shared"])
def test_what_a_list_never_frees_and_a_replay_stopped_early_bound_its_pool(profiles, mode):
    """The search's bounds: a list's pool is at least the bytes its buckets allocate and never free,
    and a replay stopped once the pool passed a limit says so, and leaves the state for the full
    replay."""
    report = profiles[32]
    buckets = sorted(report.run.buckets)
    rng = np.random.default_rng(3)
    fresh = replay.Replayer.load(report.path, [mode, "per-bucket"])
    assert fresh is not None
    for _ in range(12):
        chosen = sorted(
            {
                *rng.choice(buckets[:-1], size=int(rng.integers(0, 12)), replace=False).tolist(),
                buckets[-1],
            }
        )
        pool = predict_buckets(report, chosen, [mode]).mode(mode).pool_bytes
        assert fresh.bucket_sources.kept_bytes(mode, chosen) <= pool
        limit = pool - int(rng.integers(1, 4)) * MIB
        within, reached = fresh.pool_within(mode, chosen, limit)
        assert not within and limit < reached <= pool
        assert fresh.pool_within(mode, chosen, pool) == (True, pool)
        assert fresh.replay(mode, chosen).pool_bytes[-1] == pool
