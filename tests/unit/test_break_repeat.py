"""Repeating a graph break's allocator requests (bcgprof.measure.break_repeat), with a fake
allocator."""

from __future__ import annotations

import torch

from bcgprof.measure.break_repeat import BreakRepeater, call_signature

S = 7  # the raw handle of the stream every request is made on


class FakeAllocator:
    """Records what an op asks for as the allocator history would, and counts allocations."""

    def __init__(self):
        self.history: list[dict] = []
        self.count = 0
        self.next_addr = 1000

    def alloc(self, size: int) -> int:
        addr, self.next_addr = self.next_addr, self.next_addr + size
        self.history.append({"action": "alloc", "addr": addr, "size": size, "stream": S})
        self.count += 1
        return addr

    def free(self, addr: int, deferred: bool = False) -> None:
        self.history.append({"action": "free_requested", "addr": addr, "stream": S})
        if not deferred:
            self.history.append({"action": "free_completed", "addr": addr, "stream": S})


def _repeater(fake: FakeAllocator, made: list):
    def allocate(size, stream):
        made.append((size, stream))
        return object()

    return BreakRepeater(lambda: fake.count, lambda: fake.history, lambda: [S], allocate)


def test_the_first_call_of_a_signature_runs_and_later_ones_repeat_its_requests():
    fake, made, ran = FakeAllocator(), [], []

    def op(x, out, *, scale):
        ran.append(tuple(x.shape))
        a = fake.alloc(x.numel() * 4)
        b = fake.alloc(64)
        fake.free(a)
        c = fake.alloc(128)
        fake.free(b)
        fake.free(c)

    repeater = _repeater(fake, made)
    x, out = torch.zeros(4, 2), torch.zeros(4, 2)
    for _ in range(3):  # three layers of one kind
        repeater(op, (x, out), {"scale": 0.5})
    assert ran == [(4, 2)] and (repeater.run, repeater.repeated) == (1, 2)
    # the first call's sizes, in its order, on its stream
    assert made == [(32, S), (64, S), (128, S)] * 2
    repeater(op, (torch.zeros(8, 2), torch.zeros(8, 2)), {"scale": 0.5})  # another bucket: runs
    assert ran == [(4, 2), (8, 2)] and repeater.run == 2


def test_a_call_that_cannot_be_repeated_exactly_always_runs():
    fake, made, ran = FakeAllocator(), [], []

    def deferred(x):  # its block is freed only once another stream is done with it
        ran.append(1)
        fake.free(fake.alloc(16), deferred=True)

    def keeps(x):  # leaves a block allocated: a second call would not allocate it again
        ran.append(2)
        fake.alloc(16)

    repeater = _repeater(fake, made)
    x = torch.zeros(2)
    for _ in range(2):
        repeater(deferred, (x,), {})
        repeater(keeps, (x,), {})
    assert ran == [1, 2, 1, 2] and made == [] and repeater.repeated == 0


def test_a_call_that_allocates_nothing_is_repeated_by_doing_nothing():
    fake, made, ran = FakeAllocator(), [], []
    repeater = _repeater(fake, made)
    x = torch.zeros(3)

    def op(t):
        ran.append(1)

    for _ in range(3):
        repeater(op, (x,), {})
    assert ran == [1] and made == [] and repeater.repeated == 2


def test_a_signature_tells_apart_what_the_requests_may_depend_on():
    x = torch.zeros(4, 8)
    key = call_signature(print, (x,), {"window": 128})
    x.fill_(3.0)
    assert key == call_signature(print, (x,), {"window": 128})  # values do not matter
    for other in (
        (x.t(),),
        (x[1:],),
        (torch.zeros(4, 8, dtype=torch.float64),),
        (torch.zeros(4, 9),),
    ):
        assert call_signature(print, other, {"window": 128}) != key  # strides, offset, dtype, shape
    assert call_signature(print, (x,), {"window": None}) != key
    assert call_signature(len, (x,), {"window": 128}) != key  # another op
    # an argument it cannot describe: always runs
    assert call_signature(print, (x, object()), {}) is None


def test_a_call_with_an_argument_it_cannot_describe_runs_every_time():
    fake, made, ran = FakeAllocator(), [], []
    repeater = _repeater(fake, made)
    handle = object()  # no signature: the repeater cannot tell two such calls apart

    def op(x, h):
        ran.append(1)
        fake.free(fake.alloc(16))

    for _ in range(3):
        repeater(op, (torch.zeros(2), handle), {})
    assert ran == [1, 1, 1] and made == [] and (repeater.run, repeater.repeated) == (3, 0)
    assert repeater.plans == {}  # nothing planned for it
