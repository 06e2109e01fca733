"""The parts of the breakable-graph engine that need no GPU: break routing, views, errors."""

import pytest
import torch

from bcgprof.bcg.breaks import break_handler, graph_break
from bcgprof.bcg.graph import _detach_refs, non_owning_view


def _double(x, out):
    out.copy_(x * 2)


def test_graph_break_without_a_capture_runs_the_op():
    x = torch.arange(4.0)
    out = torch.empty_like(x)
    graph_break(_double, x, out)
    assert torch.equal(out, x * 2)


def test_graph_break_goes_to_the_active_handler_then_back():
    seen = []
    x, out = torch.ones(3), torch.zeros(3)
    with break_handler(lambda fn, args, kwargs: seen.append((fn, args, kwargs))):
        graph_break(_double, x, out, extra=1)
        with break_handler(lambda fn, args, kwargs: seen.append("inner")):
            graph_break(_double, x, out)
        graph_break(_double, x, out)
    assert seen[0][0] is _double and seen[0][2] == {"extra": 1}
    assert seen[1] == "inner" and seen[2][0] is _double
    assert torch.equal(out, torch.zeros(3))  # the handler, not the op, ran
    graph_break(_double, x, out)  # outside: the op again
    assert torch.equal(out, torch.full((3,), 2.0))


def test_handler_is_restored_after_an_exception():
    def boom(fn, args, kwargs):
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError), break_handler(boom):
        graph_break(_double, torch.ones(1), torch.zeros(1))
    out = torch.zeros(1)
    graph_break(_double, torch.ones(1), out)
    assert out.item() == 2.0


def test_non_owning_view_aliases_the_memory_with_the_same_layout():
    base = torch.arange(24.0).view(4, 6)
    t = base[1:, ::2]
    view = non_owning_view(t)
    assert view.data_ptr() == t.data_ptr()
    assert view.shape == t.shape and view.stride() == t.stride()
    assert torch.equal(view, t)
    t.fill_(-1)  # a write through the original is seen through the view
    assert torch.equal(view, torch.full_like(view, -1))


def test_detach_refs_keeps_structure_and_leaves_host_tensors_alone():
    cpu = torch.ones(2)
    args = (cpu, [1, {"k": cpu}], "name", None)
    out = _detach_refs(args)
    assert out[0] is cpu and out[1][1]["k"] is cpu and out[2] == "name" and out[3] is None


def test_a_graph_torch_did_not_keep_is_counted_without_the_cuda_bindings(monkeypatch):
    """graph_node_count asks the graph for its raw handle first: a graph without one (torch keeps it
    only with keep_graph=True) gives None before the bindings are imported or called."""
    import sys
    import types

    from bcgprof.bcg.graph import graph_node_count

    calls = []
    runtime = types.ModuleType("cuda.bindings.runtime")
    runtime.cudaGraphGetNodes = lambda raw, n: calls.append(raw) or (0, None, 42)
    bindings = types.ModuleType("cuda.bindings")
    bindings.runtime = runtime
    cuda = types.ModuleType("cuda")
    cuda.bindings = bindings
    for name, module in (
        ("cuda", cuda),
        ("cuda.bindings", bindings),
        ("cuda.bindings.runtime", runtime),
    ):
        monkeypatch.setitem(sys.modules, name, module)

    class NotKept:
        def raw_cuda_graph(self):
            raise RuntimeError("You cannot access the raw cudaGraph_t instance unless keep_graph")

    class Kept:
        def raw_cuda_graph(self):
            return 1234

    assert graph_node_count(NotKept()) is None and calls == []
    assert graph_node_count(Kept()) == 42 and calls == [1234]
