"""bcgprof.bcg.driver over a stand-in for the CUDA Python bindings' driver module: the result
shapes the bindings return (CUDA 12's edges without data, CUDA 13's with), nodes read into
descriptions, unreadable parameters, and the update and launch calls (no GPU needed)."""

from types import SimpleNamespace

import pytest

from bcgprof.bcg import driver
from bcgprof.bcg.signature import graph_signature

OK, FAILED = 0, 999


class Kind(int):
    def __new__(cls, value, name):
        kind = super().__new__(cls, value)
        kind.name = name
        return kind


KERNEL, MEMSET, EMPTY = (
    Kind(i, n)
    for i, n in enumerate(
        ("CU_GRAPH_NODE_TYPE_KERNEL", "CU_GRAPH_NODE_TYPE_MEMSET", "CU_GRAPH_NODE_TYPE_EMPTY")
    )
)


class Node(int):
    """A node handle (an integer, as the bindings convert handles) and what the stand-in returns."""

    def __new__(cls, handle, kind, **params):
        node = super().__new__(cls, handle)
        node.kind, node.params = kind, params
        return node


def kernel(handle, func, grid=(64, 1, 1), args=0, readable=True):
    return Node(
        handle,
        KERNEL,
        func=func,
        kern=0,
        gridDimX=grid[0],
        gridDimY=grid[1],
        gridDimZ=grid[2],
        blockDimX=128,
        blockDimY=1,
        blockDimZ=1,
        sharedMemBytes=0,
        kernelParams=args,
        readable=readable,
    )


class Bindings:
    """What cuda.bindings.driver returns, for the calls bcgprof makes."""

    CUkernelNodeAttrID = SimpleNamespace(
        CU_LAUNCH_ATTRIBUTE_COOPERATIVE=1,
        CU_LAUNCH_ATTRIBUTE_PRIORITY=8,
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION=4,
    )
    CUgraphExecUpdateResult = SimpleNamespace(CU_GRAPH_EXEC_UPDATE_SUCCESS=0)

    def __init__(self, graphs, edge_data):
        self.graphs = graphs  # handle -> (nodes, edges as (node, node))
        self.edge_data = edge_data  # CUDA 13's bindings: cuGraphGetEdges also returns edge data
        self.launched, self.refuse = [], set()

    def cuGraphGetNodes(self, graph, count=0):
        nodes = self.graphs[graph][0]
        return OK, (nodes[:count] if count else []), len(nodes)

    def cuGraphGetEdges(self, graph, count=0):
        edges = self.graphs[graph][1][:count] if count else []
        sources, targets = [e[0] for e in edges], [e[1] for e in edges]
        total = len(self.graphs[graph][1])
        if self.edge_data:
            data = [SimpleNamespace(from_port=0, to_port=0, type=0) for _ in edges]
            return OK, sources, targets, data, total
        return OK, sources, targets, total

    def cuGraphNodeGetType(self, node):
        return OK, node.kind

    def cuGraphKernelNodeGetParams(self, node):
        if not node.params["readable"]:
            return FAILED, None
        return OK, SimpleNamespace(**node.params)

    def cuGraphKernelNodeGetAttribute(self, node, attr):
        dims = SimpleNamespace(x=1, y=1, z=1)
        return OK, SimpleNamespace(cooperative=0, priority=0, clusterDim=dims)

    def cuGraphMemsetNodeGetParams(self, node):
        return OK, SimpleNamespace(
            dst=node.params["dst"],
            pitch=0,
            value=0,
            elementSize=4,
            width=node.params["width"],
            height=1,
        )

    def cuGraphExecUpdate(self, executable, graph):
        if graph in self.refuse:
            return FAILED, SimpleNamespace(result=3)
        return OK, SimpleNamespace(result=0)

    def cuGraphLaunch(self, executable, stream):
        self.launched.append((executable, stream))
        return (OK,) if executable > 0 else (FAILED,)


def layer_graph(base, weight_ptr, tokens=1024):
    """A segment: a kernel, a memset and a kernel in a chain, its addresses shifted by ``base``."""
    nodes = [
        kernel(base + 1, func=0xA, grid=(tokens, 1, 1), args=weight_ptr),
        Node(base + 2, MEMSET, dst=weight_ptr + 64, width=tokens),
        kernel(base + 3, func=0xB, args=weight_ptr + 128),
    ]
    return nodes, [(nodes[0], nodes[1]), (nodes[1], nodes[2])]


@pytest.fixture(params=[False, True], ids=["cuda12-edges", "cuda13-edges"])
def bindings(request, monkeypatch):
    graphs = {
        100: layer_graph(0, 0x7000),
        200: layer_graph(10, 0x9000),
        300: layer_graph(20, 0x7000, 2048),
    }
    fake = Bindings(graphs, edge_data=request.param)
    monkeypatch.setattr(driver, "cu", fake)
    return fake


def test_segments_that_differ_in_addresses_read_as_one_signature(bindings):
    sigs = {g: graph_signature(*driver.describe_graph(g)) for g in (100, 200, 300)}
    assert sigs[100] == sigs[200]
    assert sigs[100] != sigs[300]  # another token count: another grid and fill width


def test_nodes_and_edges_are_read_by_position(bindings):
    nodes, edges = driver.describe_graph(100)
    assert [kind for kind, _ in nodes] == ["kernel", "memset", "kernel"]
    func, grid, block, smem, attributes = nodes[0][1]
    assert (func, grid, block, smem) == (0xA << 64, (1024, 1, 1), (128, 1, 1), 0)
    assert dict(attributes) == {"cooperative": 0, "priority": 0, "clusterDim": (1, 1, 1)}
    assert nodes[1] == ("memset", (4, 1024, 1, 0))  # element size, width, height, value; no address
    data = (0, 0, 0) if bindings.edge_data else ()
    assert edges == [(0, 1, *data), (1, 2, *data)]


def test_a_node_whose_parameters_cannot_be_read_is_described_by_its_kind(bindings):
    node = kernel(5, func=0xC, readable=False)
    bindings.graphs[400] = ([node, Node(6, EMPTY)], [(node, Node(6, EMPTY))])
    nodes, edges = driver.describe_graph(400)
    assert nodes == [("kernel", ("unread",)), ("empty", ())]
    assert [e[:2] for e in edges] == [(0, 1)]


def test_an_empty_graph_has_no_nodes(bindings):
    bindings.graphs[500] = ([], [])
    assert driver.describe_graph(500) == ([], [])


def test_update_and_launch(bindings):
    ops = driver.DriverOps()
    assert ops.update(7, 100) is True
    bindings.refuse.add(200)
    assert ops.update(7, 200) is False
    ops.launch(7, 55)
    assert bindings.launched == [(7, 55)]
    with pytest.raises(driver.DriverError, match="cuGraphLaunch failed"):
        ops.launch(-1, 55)


def test_missing_bindings_are_named(monkeypatch):
    monkeypatch.setattr(driver, "cu", None)
    assert "cuda-python" in driver.missing_bindings()
    monkeypatch.setattr(driver, "cu", object())
    assert driver.missing_bindings() == ""
