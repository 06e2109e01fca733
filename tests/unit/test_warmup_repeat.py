"""Planning a warm-up run's repeat from the allocator history (torch-free), and carrying a plan
out."""

from __future__ import annotations

from bcgprof.measure.warmup_repeat import ALLOC, FREE, Request, plan_repeat, repeat_run

S, OTHER = 7, 9  # raw stream handles: the capture stream and one the caller cannot name


def alloc(addr, size, stream=S):
    return {"action": "alloc", "addr": addr, "size": size, "stream": stream}


def free(addr, size=0, completed=True):
    out = [{"action": "free_requested", "addr": addr, "size": size, "stream": S}]
    return out + (
        [{"action": "free_completed", "addr": addr, "size": size, "stream": S}] if completed else []
    )


def run_history():
    """An earlier tensor freed and a segment emptied before the run, then the run: a, b, free a,
    out, free b."""
    before = [
        *free(50),
        {"action": "segment_free", "addr": 1000, "size": 2 << 20},
        alloc(60, 8),
        *free(60),
    ]
    run = [
        {"action": "segment_alloc", "addr": 100, "size": 2 << 20},
        alloc(100, 512),
        alloc(200, 4096),
        *free(100),
        alloc(300, 1024),
        *free(200),
        {"action": "snapshot", "addr": 0, "size": 0},
    ]
    return before + run


def test_the_plan_is_the_runs_requests_in_order_counted_back_from_the_end():
    plan = plan_repeat(run_history(), 3, 300, 1024, [S])
    assert plan is not None
    assert plan.requests == (
        Request(ALLOC, 0, 512, S),
        Request(ALLOC, 1, 4096, S),
        Request(FREE, 0),
        Request(ALLOC, 2, 1024, S),
        Request(FREE, 1),
    )
    assert plan.output == 2 and plan.output_bytes == 1024


def test_repeating_a_plan_allocates_and_frees_in_order_and_returns_the_output_still_held():
    plan = plan_repeat(run_history(), 3, 300, 1024, [S])
    assert plan is not None
    log: list[str] = []

    class Block:
        def __init__(self, size, stream):
            self.size = size
            log.append(f"+{size}@{stream}")

        def __del__(self):
            log.append(f"-{self.size}")

    out = repeat_run(plan, Block)
    assert log == ["+512@7", "+4096@7", "-512", "+1024@7", "-4096"]
    assert out.size == 1024  # not freed: it is the run's output


def test_a_run_that_cannot_be_repeated_by_its_requests_is_refused():
    h = run_history()
    # counted from mid-run: it frees a block it did not make
    assert plan_repeat(h, 2, 300, 1024, [S]) is None
    assert plan_repeat(h, 9, 300, 1024, [S]) is None  # more allocations than the history holds
    assert plan_repeat(h, 0, 300, 1024, [S]) is None  # a run that allocated nothing made no output
    assert plan_repeat(h, 3, 300, 1024, [OTHER]) is None  # a stream the caller cannot name
    assert plan_repeat(h, 3, 200, 4096, [S]) is None  # the output is not what is left
    assert plan_repeat(h, 3, 300, 2048, [S]) is None  # nor of its size
    kept = h[:-3] + [
        {"action": "snapshot", "addr": 0, "size": 0}
    ]  # b never freed: a cache a second run would reuse
    assert plan_repeat(kept, 3, 300, 1024, [S]) is None
    deferred = h[:-3] + free(200, completed=False) + [{"action": "snapshot", "addr": 0, "size": 0}]
    assert plan_repeat(deferred, 3, 300, 1024, [S]) is None  # b's free waits on another stream
    stranger = h[:-1] + free(50)  # the run frees a tensor it did not make
    assert plan_repeat(stranger, 3, 300, 1024, [S]) is None
    assert plan_repeat(h + [{"action": "oom", "addr": 0, "size": 0}], 3, 300, 1024, [S]) is None


def test_requests_on_two_named_streams_keep_their_streams():
    h = [alloc(100, 512), alloc(200, 64, stream=OTHER), *free(200), alloc(300, 1024), *free(100)]
    plan = plan_repeat(h, 3, 300, 1024, [S, OTHER])
    assert plan is not None
    assert [r.stream for r in plan.requests if r.op == ALLOC] == [S, OTHER, S]
