"""Position waits: bounded in number, woken by the materializer, not by polling."""

from __future__ import annotations

import asyncio
import threading

import pytest
from fakes import offline_parts
from waits import until

from streamiq.config import Settings
from streamiq.errors import Overloaded
from streamiq.serving.changelog.materializer import PartitionState
from streamiq.serving.node import Node
from streamiq.supervise import Supervisor
from streamiq.views.base import load_app

TOKEN = [("in", 0, 41)]  # reflected once the position of input partition 0 passes 41


class FakeMaterializer:
    def __init__(self) -> None:
        self.states = {("balances", 0): PartitionState(position={"in": {0: 10}})}


def _node(max_waiters: int) -> Node:
    parts = offline_parts({"balances": 1}, FakeMaterializer())
    return Node(Settings(app="bank", max_waiters=max_waiters), load_app("bank"), parts,
                Supervisor())


async def test_waiters_beyond_the_bound_are_refused_and_the_others_woken_by_an_apply(
        ) -> None:
    node = _node(max_waiters=2)
    waits = [asyncio.create_task(node.wait_position("balances", 0, TOKEN, 30.0))
             for _ in range(2)]
    await until(lambda: node.waiters == 2, "two waiters")
    with pytest.raises(Overloaded, match="--max-waiters"):
        await node.wait_position("balances", 0, TOKEN, 30.0)
    # the materializer applies the record (its own thread) and says so
    node.materializer.states[("balances", 0)] = PartitionState(position={"in": {0: 42}})
    threading.Thread(target=node.applied).start()
    assert await asyncio.gather(*waits) == [True, True]
    assert node.waiters == 0
    assert await node.wait_position("balances", 0, TOKEN, 0.0)  # reflected: no wait at all


async def test_a_wait_that_is_never_reflected_ends_at_its_bound() -> None:
    node = _node(max_waiters=5)
    assert not await node.wait_position("balances", 0, TOKEN, 0.05)
    assert node.waiters == 0
