"""Shared graph executables without CUDA: segment signatures over fake node descriptions, and the
groups' bookkeeping (join, launch, update, refusal, a failed capture) over fake driver calls."""

import pytest

from bcgprof.bcg.executables import SharedExecutables
from bcgprof.bcg.signature import graph_signature, group_indices, kernel_node, topological_order

GEMM, NORM, ADD = 0x7F00_0001, 0x7F00_0002, 0x7F00_0003  # fake function handles


def k(func=GEMM, grid=(128, 1, 1), block=(256, 1, 1), smem=0, attrs=()):
    return kernel_node(func, grid, block, smem, attrs)


def layer(tokens=1024):
    """A decoder layer's segment between two attention calls: norm, GEMM, add, as a chain."""
    nodes = [k(NORM, grid=(tokens, 1, 1)), k(GEMM, grid=(tokens // 64, 8, 1), smem=49152), k(ADD)]
    return nodes, [(0, 1), (1, 2)]


# ---------------------------------------------------------------- signatures


def test_segments_of_one_layer_shape_have_one_signature():
    assert graph_signature(*layer()) == graph_signature(*layer())


@pytest.mark.parametrize(
    "change",
    [
        lambda n: n.__setitem__(1, k(GEMM, grid=(32, 8, 1), smem=49152)),  # another grid
        lambda n: n.__setitem__(1, k(GEMM, grid=(16, 8, 1), block=(128, 1, 1), smem=49152)),
        lambda n: n.__setitem__(
            1, k(GEMM, grid=(16, 8, 1), smem=0)
        ),  # another dynamic shared memory
        lambda n: n.__setitem__(1, k(ADD + 7, grid=(16, 8, 1), smem=49152)),  # another function
        lambda n: n.__setitem__(1, k(GEMM, grid=(16, 8, 1), smem=49152, attrs=[("priority", 1)])),
        lambda n: n.__setitem__(2, ("memset", (4, 1024, 1, 0))),  # another kind of node
    ],
)
def test_any_launch_parameter_that_is_not_an_address_changes_the_signature(change):
    nodes, edges = layer()
    changed = list(nodes)
    change(changed)
    assert graph_signature(changed, edges) != graph_signature(nodes, edges)


def test_topology_is_part_of_the_signature():
    nodes, _ = layer()
    chain = graph_signature(nodes, [(0, 1), (1, 2)])
    fork = graph_signature(nodes, [(0, 1), (0, 2)])
    assert chain != fork
    assert graph_signature(nodes, [(0, 1), (1, 2, 0, 0, 1)]) != chain  # edge data counts too


def test_listing_order_that_is_not_dependency_order_is_canonicalised():
    a, b, c = k(NORM), k(GEMM), k(ADD)
    listed_in_order = graph_signature([a, b, c], [(0, 1), (1, 2)])
    listed_backwards = graph_signature([c, b, a], [(2, 1), (1, 0)])
    assert listed_backwards == listed_in_order


def test_launch_attributes_are_compared_as_a_set():
    one = k(attrs=[("priority", 0), ("cooperative", 0)])
    other = k(attrs=[("cooperative", 0), ("priority", 0)])
    assert one == other


def test_topological_order_refuses_cycles_and_unknown_nodes():
    assert topological_order(3, [(2, 0), (0, 1)]) == [2, 0, 1]
    assert topological_order(3, []) == [0, 1, 2]
    with pytest.raises(ValueError, match="cycle"):
        topological_order(2, [(0, 1), (1, 0)])
    with pytest.raises(ValueError, match="outside"):
        topological_order(2, [(0, 5)])


def test_group_indices_number_signatures_as_first_seen():
    first, middle, last = (
        graph_signature(*g) for g in (([k(NORM)], []), layer(), ([k(ADD), k(NORM)], [(0, 1)]))
    )
    assert group_indices([first, middle, middle, middle, last, middle]) == [0, 1, 1, 1, 2, 1]
    assert group_indices([]) == []


# ---------------------------------------------------------------- groups over a fake driver


class FakeDriver:
    """Executables as integers holding a graph; an update succeeds unless the pair is refused."""

    def __init__(self, refuse=()):
        self.holds: dict[int, int] = {}  # executable -> the graph it runs
        self.refuse = set(refuse)  # graphs no executable may be updated to
        self.launched: list[tuple[int, int, int]] = []  # (executable, graph it held, stream)
        self.calls: list[str] = []

    def instantiate(self, graph):
        executable = 1000 + len(self.holds)
        self.holds[executable] = graph
        self.calls.append(f"instantiate {graph}")
        return executable

    def update(self, executable, graph):
        self.calls.append(f"update {executable}<-{graph}")
        if graph in self.refuse:
            self.holds[executable] = -1  # a failed update leaves nothing one may rely on
            return False
        self.holds[executable] = graph
        return True

    def launch(self, executable, stream):
        self.launched.append((executable, self.holds[executable], stream))


def capture_bucket(share, driver, graphs, signatures):
    """Place one bucket's segments, as BreakableGraph does after each segment's capture."""
    members, made = [], 0
    for graph, sig in zip(graphs, signatures, strict=True):
        member, new = share.add(graph, sig, lambda g=graph: driver.instantiate(g))
        members.append(member)
        made += new
    return members, made


def bucket_signatures(layers, tokens=1024):
    """The signatures of a bucket's layers + 1 segments: before the first attention, between two,
    after the last."""
    first = graph_signature([k(NORM, grid=(tokens, 1, 1))], [])
    middle = graph_signature(*layer(tokens))
    last = graph_signature([k(ADD, grid=(tokens, 1, 1)), k(NORM)], [(0, 1)])
    return [first, *[middle] * (layers - 1), last]


def test_a_bucket_of_n_layers_needs_three_executables_and_replays_every_segment_on_its_own_graph():
    driver = FakeDriver()
    share = SharedExecutables(driver)
    graphs = list(range(1, 9))  # eight segments: seven breaks
    members, made = capture_bucket(share, driver, graphs, bucket_signatures(7))
    assert made == 3 == share.executables == share.signatures
    assert share.segments == 8
    made_for = [c for c in driver.calls if c.startswith("instantiate")]
    assert made_for == ["instantiate 1", "instantiate 2", "instantiate 8"]
    for _ in range(2):  # a replay, twice
        for member in members:
            share.launch(member, stream=77)
    held = [graph for _, graph, _ in driver.launched]
    assert held == graphs * 2  # each launch ran its own segment's graph
    assert {stream for _, _, stream in driver.launched} == {77}
    # the middle group's executable held segment 7 after capture: every middle launch updates
    assert share.updates == 2 * 6 and share.launches == 16


def test_a_group_of_one_launches_without_updates():
    driver = FakeDriver()
    share = SharedExecutables(driver)
    sigs = bucket_signatures(2)  # three segments, three distinct signatures
    members, made = capture_bucket(share, driver, [1, 2, 3], sigs)
    for member in members * 3:
        share.launch(member, stream=0)
    assert made == 3 and share.updates == 0
    assert not [c for c in driver.calls if c.startswith("update")]


def test_buckets_of_another_size_make_their_own_groups_and_one_of_the_same_size_joins():
    driver = FakeDriver()
    share = SharedExecutables(driver)
    _, big = capture_bucket(share, driver, [1, 2, 3, 4], bucket_signatures(3, tokens=2048))
    _, small = capture_bucket(share, driver, [5, 6, 7, 8], bucket_signatures(3, tokens=1024))
    _, again = capture_bucket(share, driver, [9, 10, 11, 12], bucket_signatures(3, tokens=1024))
    assert (big, small, again) == (3, 3, 0)
    assert share.executables == 6 and share.segments == 12


def test_a_segment_the_driver_refuses_gets_an_executable_of_its_own():
    driver = FakeDriver(refuse={3})
    share = SharedExecutables(driver)
    members, made = capture_bucket(share, driver, [1, 2, 3, 4, 5], bucket_signatures(4))
    assert made == 4 and share.refused == 1
    assert share.executables == 4 and share.signatures == 3  # more executables than signatures
    for member in members:
        share.launch(member, stream=0)
    assert [graph for _, graph, _ in driver.launched] == [1, 2, 3, 4, 5]


def test_an_update_refused_at_launch_is_an_error_and_the_next_launch_updates_again():
    driver = FakeDriver()
    share = SharedExecutables(driver)
    members, _ = capture_bucket(share, driver, [1, 2, 3, 4], bucket_signatures(3))
    driver.refuse = {2}
    with pytest.raises(RuntimeError, match="refused to update"):
        share.launch(members[1], stream=0)
    driver.refuse = set()
    share.launch(members[2], stream=0)  # the group held no known graph: updated, not assumed
    assert driver.launched[-1][1] == 3


def test_a_failed_capture_leaves_the_groups_it_started_and_the_members_it_added():
    driver = FakeDriver()
    share = SharedExecutables(driver)
    kept, _ = capture_bucket(share, driver, [1, 2, 3, 4], bucket_signatures(3, tokens=2048))
    failed, made = capture_bucket(share, driver, [5, 6, 7], bucket_signatures(3, tokens=1024)[:3])
    assert made == 2 and share.executables == 5
    share.forget(failed)
    assert share.executables == 3 and share.segments == 4
    assert all(m.group is None for m in failed)
    with pytest.raises(RuntimeError, match="removed"):
        share.launch(failed[0], stream=0)
    for member in kept:
        share.launch(member, stream=0)
    assert [graph for _, graph, _ in driver.launched] == [1, 2, 3, 4]
