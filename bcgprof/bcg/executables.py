"""Graph executables shared by the segments of one signature (``--executables per-signature``).

Mechanism: :class:`SharedExecutables` keeps groups of segment graphs, each with one instantiated
executable. A segment joins the first group of its signature (:mod:`bcgprof.bcg.signature`) whose
executable accepts the segment's graph through ``cudaGraphExecUpdate``, which leaves the executable
holding that graph; when none does, the segment's own graph is instantiated and starts a group. A
launch updates the group's executable to the segment's graph when it last held another one, then
launches it on the given stream.

Invariant: at every launch a group's executable holds the graph of the segment being launched, so a
replay runs exactly the work each segment captured. An update affects only later launches (as the
CUDA documentation says of every executable update), so updating between stream-ordered launches is
safe while earlier launches of the same executable are still queued. A failed update may leave the
executable in any state: the group then holds no known graph, and its next launch updates first.

Cost: one executable per group instead of one per segment (the driver memory an executable holds);
one update at capture for each segment that joins a group; at replay, one update on the host before
each launch whose segment differs from the last one launched on that executable (in a breakable
capture, every layer's segment but the first).

The driver calls come through an :class:`ExecutableOps`, so this bookkeeping runs without CUDA in
tests; :class:`bcgprof.bcg.driver.DriverOps` is the CUDA one. Imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from bcgprof.bcg.signature import Signature


class ExecutableOps(Protocol):
    """The two driver calls sharing needs, on raw handles (integers)."""

    def update(self, executable: int, graph: int) -> bool:
        """Make ``executable`` run ``graph``; False when the driver refuses."""
        ...

    def launch(self, executable: int, stream: int) -> None:
        """Launch ``executable`` on ``stream``; raises on failure."""
        ...


@dataclass(eq=False)
class Member:
    """One segment in a group: its raw graph handle, and what keeps that graph alive."""

    graph: int
    signature: Signature
    group: Optional[Group] = None
    keep: Any = None  # the torch CUDAGraph that owns the raw graph


@dataclass(eq=False)
class Group:
    """Segments of one signature that run on one executable."""

    signature: Signature
    executable: int
    owner: Member  # the member whose graph was instantiated; it keeps the executable alive
    members: list[Member] = field(default_factory=list)
    current: Optional[Member] = None  # the member whose graph the executable holds; None: unknown


class SharedExecutables:
    """Groups of segments sharing one executable, for one capture's buckets (one mode's process)."""

    def __init__(self, ops: ExecutableOps):
        self.ops = ops
        self._groups: dict[Signature, list[Group]] = {}
        self.launches = 0
        self.updates = 0  # updates made before launches
        self.refused = 0  # joins the driver refused: the segment got an executable of its own

    def add(
        self, graph: int, signature: Signature, instantiate: Callable[[], int], keep: Any = None
    ) -> tuple[Member, bool]:
        """Place a captured segment; return its member and whether an executable was made for it.

        ``instantiate()`` instantiates the segment's own graph and returns the executable's handle;
        it is called only when no group of ``signature`` accepts the graph."""
        member = Member(graph, signature, keep=keep)
        for group in self._groups.get(signature, ()):
            if self.ops.update(group.executable, graph):
                group.current = member
                self._join(group, member)
                return member, False
            group.current = None
            self.refused += 1
        group = Group(signature, int(instantiate()), owner=member)
        group.current = member
        self._groups.setdefault(signature, []).append(group)
        self._join(group, member)
        return member, True

    @staticmethod
    def _join(group: Group, member: Member) -> None:
        member.group = group
        group.members.append(member)

    def launch(self, member: Member, stream: int) -> None:
        """Run ``member``'s graph on ``stream``, first updating the group's executable to it when
        the executable holds another graph."""
        group = member.group
        if group is None:
            raise RuntimeError(
                "this segment was removed from its executable's group; capture it again"
            )
        if group.current is not member:
            group.current = None
            if not self.ops.update(group.executable, member.graph):
                raise RuntimeError(
                    "the driver refused to update a shared graph executable to a segment it "
                    "accepted at capture; capture with --executables per-segment"
                )
            group.current = member
            self.updates += 1
        self.ops.launch(group.executable, stream)
        self.launches += 1

    def forget(self, members: Iterable[Member]) -> None:
        """Remove the segments of a capture that failed; a group left empty goes, with its
        executable's owner. A group's owner is its first member, so a group that a failed capture
        started holds that capture's segments only."""
        for member in members:
            group = member.group
            if group is None:
                continue
            group.members.remove(member)
            member.group = None
            if group.current is member:
                group.current = None
            if not group.members:
                self._groups[group.signature].remove(group)
                if not self._groups[group.signature]:
                    del self._groups[group.signature]

    @property
    def executables(self) -> int:
        return sum(len(groups) for groups in self._groups.values())

    @property
    def signatures(self) -> int:
        return len(self._groups)

    @property
    def segments(self) -> int:
        return sum(len(g.members) for groups in self._groups.values() for g in groups)
