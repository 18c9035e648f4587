"""Readiness: a node is ready only when every partition it should hold is restored."""

from __future__ import annotations

from fakes import offline_parts

from streamiq.config import Settings
from streamiq.serving.changelog.materializer import PartitionState
from streamiq.serving.node import Node
from streamiq.supervise import Supervisor
from streamiq.views.base import load_app


class FakeMaterializer:
    def __init__(self) -> None:
        self.states: dict[tuple[str, int], PartitionState] = {}

    def holding(self) -> dict[tuple[str, int], PartitionState]:
        return dict(self.states)


def _node() -> Node:
    parts = offline_parts({"balances": 2}, FakeMaterializer())
    node = Node(Settings(app="bank"), load_app("bank"), parts, Supervisor())
    node.assigning = True
    return node


def test_not_ready_before_the_assignment_is_picked_up() -> None:
    node = _node()
    node.wanted = {("balances", 0), ("balances", 1)}
    assert not node.ready()  # nothing held yet: must not report ready (was all([]) == True)


def test_ready_only_when_every_wanted_partition_is_restored() -> None:
    node = _node()
    node.wanted = {("balances", 0), ("balances", 1)}
    node.materializer.states[("balances", 0)] = PartitionState(restored=True)
    node.materializer.states[("balances", 1)] = PartitionState(restored=False)
    assert not node.ready()
    node.materializer.states[("balances", 1)].restored = True
    assert node.ready()


def test_a_node_with_no_partitions_to_hold_is_ready() -> None:
    node = _node()
    node.wanted = set()  # e.g. more nodes than partitions
    assert node.ready()


class _Stoppable(FakeMaterializer):
    def __init__(self, order: list[str]) -> None:
        super().__init__()
        self.order = order

    def stop(self) -> None:
        self.order.append("materializer")


async def test_stop_closes_the_front_ends_first_once() -> None:
    """``Node.closing`` (the SQL port) is closed before the node leaves the cluster and
    closes its stores, and only once however often stop is called."""
    order: list[str] = []
    node = Node(Settings(app="bank"), load_app("bank"),
                offline_parts({"balances": 2}, _Stoppable(order)), Supervisor())

    async def close_sql() -> None:
        order.append("sql")

    node.closing.append(close_sql)
    await node.stop()
    await node.stop()
    assert order == ["sql", "materializer"]
