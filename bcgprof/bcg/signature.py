"""A segment graph's signature: what two graphs must share for one executable to run either.

Mechanism: a graph is described by its nodes, each a ``(kind, payload)`` pair, and its edges, each
``(source, target, *edge data)`` by node position. A payload holds every parameter of its node that
is not an address: a kernel's function handle, grid, block, dynamic shared memory and launch
attributes; a copy's memory kinds and extents; a fill's element size, extents and value; a child
graph's own signature. :func:`graph_signature` puts the nodes in a canonical topological order
(Kahn's, ties broken by listing position) and renumbers the edges by it, so the signature is the
graph's structure with every address left out.

Invariant: graphs with equal signatures differ at most in addresses (kernel arguments, copy and fill
end points), which is what ``cudaGraphExecUpdate`` may change in an instantiated executable. Equal
signatures are necessary for sharing, not proof of it: the update itself is the final test
(:mod:`bcgprof.bcg.executables`).

Cost: O(N log N + E) per graph in pure Python, no CUDA call; a signature is a tuple of the nodes'
payloads and edges, a few hundred bytes for a decoder layer's segment. Imports nothing heavy.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

NodeDesc = tuple[str, tuple]  # (kind, payload)
Edge = tuple  # (source position, target position, *edge data)
Signature = tuple[tuple[NodeDesc, ...], tuple[Edge, ...]]

KERNEL = "kernel"


def kernel_node(
    func: int,
    grid: Sequence[int],
    block: Sequence[int],
    shared_mem: int,
    attributes: Iterable[tuple[str, Any]] = (),
) -> NodeDesc:
    """A kernel node's description: the function's handle (not only its name: two compilations
    of one kernel share a name), grid, block, dynamic shared memory and launch attributes (sorted
    by name)."""
    return (
        KERNEL,
        (
            int(func),
            tuple(int(v) for v in grid),
            tuple(int(v) for v in block),
            int(shared_mem),
            tuple(sorted(attributes)),
        ),
    )


def topological_order(count: int, edges: Iterable[Edge]) -> list[int]:
    """The positions ``0..count-1`` in dependency order, the lowest ready position first.

    Raises ValueError for an edge naming no node, or for a cycle (a CUDA graph has none)."""
    children: list[list[int]] = [[] for _ in range(count)]
    waiting = [0] * count
    for edge in edges:
        src, dst = int(edge[0]), int(edge[1])
        if not (0 <= src < count and 0 <= dst < count):
            raise ValueError(f"edge {src}->{dst} names a node outside 0..{count - 1}")
        children[src].append(dst)
        waiting[dst] += 1
    ready = [i for i in range(count) if waiting[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        for child in children[node]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    if len(order) != count:
        raise ValueError("the graph's edges form a cycle")
    return order


def graph_signature(nodes: Sequence[NodeDesc], edges: Iterable[Edge]) -> Signature:
    """The signature of a graph of ``nodes`` (in the order the driver lists them) and ``edges``
    between their positions: the nodes in canonical order, the edges renumbered by it and sorted."""
    edges = [tuple(e) for e in edges]
    order = topological_order(len(nodes), edges)
    rank = {node: i for i, node in enumerate(order)}
    renumbered = sorted((rank[int(e[0])], rank[int(e[1])], *e[2:]) for e in edges)
    return tuple(nodes[i] for i in order), tuple(renumbered)


def group_indices(signatures: Sequence[Signature]) -> list[int]:
    """For each graph, the index of its signature among the distinct ones, numbered as first seen:
    the executable each graph would run on when every update succeeds."""
    seen: dict[Signature, int] = {}
    return [seen.setdefault(sig, len(seen)) for sig in signatures]
