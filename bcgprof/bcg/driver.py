"""The CUDA driver calls the breakable graph makes beyond torch's: a captured graph read as node
descriptions and edges, and an executable updated to another graph and launched.

Mechanism: through the CUDA Python bindings' driver API (``cuda.bindings.driver``), on the raw
handles torch gives (``CUDAGraph.raw_cuda_graph()``, ``raw_cuda_graph_exec()``, a stream's
``cuda_stream``). The driver API reads every kernel node alike, whether it was launched through the
runtime (cuBLAS, torch's own kernels) or the driver (Triton); the runtime's
``cudaGraphKernelNodeGetParams`` refuses the latter. Update and launch go through the driver as
well, so a refused update never sets the runtime's last error, which torch's next kernel-launch
check would report as its own.

:func:`describe_graph` gives what :func:`bcgprof.bcg.signature.graph_signature` takes: per node its
kind and the parameters that are not addresses (kernel: function and kernel handles, grid, block,
dynamic shared memory, launch attributes; memset: element size, extents, value; memcpy: memory
kinds and extents; child graph: its signature; any other kind: none), and the edges by node position
with their edge data where the bindings give it.

Invariant: nothing here changes a graph; ``update`` changes only the executable it is given.
Cost: seven driver calls per kernel node (its type, its parameters, five launch attributes),
a few microseconds each from Python. Imported only where a capture shares executables.
"""

from __future__ import annotations

from typing import Any, Optional

from bcgprof.bcg.signature import Edge, NodeDesc, graph_signature, kernel_node

try:
    from cuda.bindings import driver as cu
except ImportError:  # reported by missing_bindings()
    cu = None

# The launch attributes a kernel node's signature holds (those cudaGraphExecUpdate cannot change,
# or that change how it runs): the name of the attribute's id, the field of the value holding it.
_ATTRIBUTES = (
    ("CU_LAUNCH_ATTRIBUTE_COOPERATIVE", "cooperative"),
    ("CU_LAUNCH_ATTRIBUTE_PRIORITY", "priority"),
    ("CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION", "clusterDim"),
    (
        "CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE",
        "clusterSchedulingPolicyPreference",
    ),
    ("CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT", "sharedMemCarveout"),
)

_KINDS = {  # CUgraphNodeType member name -> the kind a description names
    "CU_GRAPH_NODE_TYPE_KERNEL": "kernel",
    "CU_GRAPH_NODE_TYPE_MEMCPY": "memcpy",
    "CU_GRAPH_NODE_TYPE_MEMSET": "memset",
    "CU_GRAPH_NODE_TYPE_HOST": "host",
    "CU_GRAPH_NODE_TYPE_GRAPH": "graph",
    "CU_GRAPH_NODE_TYPE_EMPTY": "empty",
}


class DriverError(RuntimeError):
    """A driver call on a graph failed."""


def missing_bindings() -> str:
    """Why executables cannot be shared here ('' when they can)."""
    if cu is None:
        return "the CUDA Python bindings are not installed (pip install cuda-python)"
    return ""


def _ok(result: Any, call: str) -> tuple:
    """The values of a binding's ``(error, *values)`` result; raises on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise DriverError(f"{call} failed: {getattr(err, 'name', int(err))}")
    return tuple(values)


def _nodes(graph: int) -> list:
    (_, count) = _ok(cu.cuGraphGetNodes(graph, 0), "cuGraphGetNodes")
    if not count:
        return []
    nodes, _ = _ok(cu.cuGraphGetNodes(graph, count), "cuGraphGetNodes")
    return list(nodes)[:count]


def _edges(graph: int, positions: dict[int, int]) -> list[Edge]:
    """Edges by node position; CUDA 13's bindings also return each edge's data (ports and type)."""
    values = _ok(cu.cuGraphGetEdges(graph, 0), "cuGraphGetEdges")
    count = int(values[-1])
    if not count:
        return []
    values = _ok(cu.cuGraphGetEdges(graph, count), "cuGraphGetEdges")
    sources, targets = list(values[0])[:count], list(values[1])[:count]
    data = list(values[2])[:count] if len(values) == 4 and values[2] is not None else [None] * count
    edges: list[Edge] = []
    for src, dst, d in zip(sources, targets, data):
        extra = () if d is None else (int(d.from_port), int(d.to_port), int(d.type))
        edges.append((positions[int(src)], positions[int(dst)], *extra))
    return edges


def _attribute(node: Any, name: str, fieldname: str) -> Optional[tuple[str, Any]]:
    ids = getattr(cu, "CUkernelNodeAttrID", None) or getattr(cu, "CUlaunchAttributeID", None)
    attr = getattr(ids, name, None) if ids is not None else None
    if attr is None:
        return None
    try:
        err, value = cu.cuGraphKernelNodeGetAttribute(node, attr)
        if int(err) != 0:
            return None
        v = getattr(value, fieldname)
        return fieldname, (int(v.x), int(v.y), int(v.z)) if hasattr(v, "x") else int(v)
    except (
        AttributeError,
        TypeError,
        ValueError,
    ):  # a binding without this field: left out for every node
        return None


def _kernel(node: Any) -> NodeDesc:
    (p,) = _ok(cu.cuGraphKernelNodeGetParams(node), "cuGraphKernelNodeGetParams")
    func = int(getattr(p, "func", 0) or 0)
    kern = int(getattr(p, "kern", 0) or 0)
    attributes = [a for a in (_attribute(node, n, f) for n, f in _ATTRIBUTES) if a is not None]
    return kernel_node(
        (func << 64) | kern,
        (p.gridDimX, p.gridDimY, p.gridDimZ),
        (p.blockDimX, p.blockDimY, p.blockDimZ),
        p.sharedMemBytes,
        attributes,
    )


def _describe(node: Any, depth: int) -> NodeDesc:
    """A node's kind and payload. A payload the bindings cannot read is the word ``unread``: such
    nodes match any node of their kind, and the update a join makes decides (it refuses a graph the
    executable cannot run), so a coarse signature may cost an executable, never a wrong replay."""
    (kind_enum,) = _ok(cu.cuGraphNodeGetType(node), "cuGraphNodeGetType")
    name = getattr(kind_enum, "name", str(kind_enum))
    kind = _KINDS.get(name, name)
    try:
        return _payload(kind, node, depth)
    except (DriverError, AttributeError, TypeError, ValueError):
        return kind, ("unread",)


def _payload(kind: str, node: Any, depth: int) -> NodeDesc:
    if kind == "kernel":
        return _kernel(node)
    if kind == "memset":
        (p,) = _ok(cu.cuGraphMemsetNodeGetParams(node), "cuGraphMemsetNodeGetParams")
        return kind, (int(p.elementSize), int(p.width), int(p.height), int(p.value))
    if kind == "memcpy":
        (p,) = _ok(cu.cuGraphMemcpyNodeGetParams(node), "cuGraphMemcpyNodeGetParams")
        return kind, (
            int(p.srcMemoryType),
            int(p.dstMemoryType),
            int(p.WidthInBytes),
            int(p.Height),
            int(p.Depth),
        )
    if kind == "host":
        (p,) = _ok(cu.cuGraphHostNodeGetParams(node), "cuGraphHostNodeGetParams")
        return kind, (int(getattr(p.fn, "getPtr", lambda: p.fn)()),)
    if kind == "graph" and depth < 8:
        (child,) = _ok(cu.cuGraphChildGraphNodeGetGraph(node), "cuGraphChildGraphNodeGetGraph")
        return kind, graph_signature(*describe_graph(int(child), depth + 1))
    return kind, ()


def describe_graph(graph: int, depth: int = 0) -> tuple[list[NodeDesc], list[Edge]]:
    """A raw CUDA graph's nodes (in the order the driver lists them) and edges, as descriptions."""
    nodes = _nodes(graph)
    positions = {int(n): i for i, n in enumerate(nodes)}
    return [_describe(n, depth) for n in nodes], _edges(graph, positions)


class DriverOps:
    """:class:`bcgprof.bcg.executables.ExecutableOps` through the CUDA driver."""

    def update(self, executable: int, graph: int) -> bool:
        err, info = cu.cuGraphExecUpdate(executable, graph)
        result = getattr(info, "result", None)
        success = cu.CUgraphExecUpdateResult.CU_GRAPH_EXEC_UPDATE_SUCCESS
        return int(err) == 0 and (result is None or result == success)

    def launch(self, executable: int, stream: int) -> None:
        _ok(cu.cuGraphLaunch(executable, stream), "cuGraphLaunch")
