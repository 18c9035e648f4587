"""Coordinator: partition-exact fan-out, Authorization travels, forwarded never forwards."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from streamiq.config import Settings
from streamiq.routing.memory import StaticMembership
from streamiq.routing.router import Endpoint
from streamiq.serving.cluster.coordinator import Coordinator, Relayed
from streamiq.serving.cluster.peers import Ask, PeerReply
from streamiq.serving.cluster.placement import Here, Refuse
from streamiq.serving.engines.partials import MultiGetPartial

ME, B, C = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
OWNER = {0: ME, 1: B, 2: C}


class FakeRouter:
    global_views: frozenset[str] = frozenset()

    def replicas(self, view: str, p: int, max_lag: int) -> list[Endpoint]:
        return [Endpoint(OWNER[p], "active", 0)]

    def owner(self, view: str, p: int, max_lag: int) -> Endpoint | None:
        return self.replicas(view, p, max_lag)[0]

    def assigned(self, view: str, p: int) -> list[str]:
        return [OWNER[p]]


def make(handler: Any) -> tuple[Coordinator, list[str]]:
    membership = StaticMembership(ME)
    node = SimpleNamespace(
        settings=Settings(internal_concurrency=4, auth=False), endpoint=ME,
        router=FakeRouter(), membership=membership,
        partitions={"v": 3}, holds=lambda view, p: p == 0, lag=lambda view, p: 0 if p == 0 else -1)
    async def send(address: str, body: bytes, deadline: float) -> PeerReply:
        reply: PeerReply = handler(Sent(address, json.loads(body)))
        return reply

    co = Coordinator(node, send=send)  # type: ignore[arg-type]
    return co, membership.suspected


class Sent:
    def __init__(self, address: str, doc: dict[str, Any]) -> None:
        self.address, self.doc = address, doc


def ask(aggs: list[str], authorization: str | None = None) -> Ask:
    """What the coordinator asks peers (rendered from a typed query: serving/query/)."""
    return Ask("aggregate", {"view": "v", "aggs": aggs}, 3, authorization, 1e12)


async def test_gather_each_partition_once_auth_travels_dead_owner_missing() -> None:
    seen: list[Sent] = []

    def handler(req: Sent) -> PeerReply:
        seen.append(req)
        if req.address == C:
            raise ConnectionRefusedError("refused")
        partial = {"found": {}, "keys": ["from a peer"]}
        return PeerReply(200, json.dumps({"partial": partial, "not_active": []}).encode())

    co, suspects = make(handler)
    locals_: list[list[int]] = []

    async def local(held: list[int]) -> MultiGetPartial:
        locals_.append(held)
        return {"found": {}, "keys": ["here"]}

    req = ask(["sum(a)", "max(b)"], "Bearer s3cret")
    partials, missing, hops = await co.gather(req, False, "v", [0, 1, 2], 10, local)
    assert sorted(k for p in partials for k in p["keys"]) == ["from a peer", "here"]
    assert missing == [2] and hops == 1
    assert locals_ == [[0]] and suspects == [C]
    to_b = [r for r in seen if r.address == B]
    assert len(to_b) == 1
    assert to_b[0].doc == {"k": "aggregate", "q": {"view": "v", "aggs": ["sum(a)", "max(b)"]},
                           "p": [1], "n": 3, "t": "Bearer s3cret"}
    await co.close()


async def test_forwarded_requests_are_answered_locally_only() -> None:
    def handler(req: Sent) -> PeerReply:
        raise AssertionError("a forwarded request must never be forwarded again")

    co, _ = make(handler)

    async def local(held: list[int]) -> MultiGetPartial:
        return {"found": {}, "keys": [str(p) for p in held]}

    req = ask([])
    partials, missing, hops = await co.gather(req, True, "v", [0, 1], 10, local)
    assert partials == [{"found": {}, "keys": ["0"]}] and missing == [1] and hops == 0

    async def one(here: Here) -> str:
        raise AssertionError("partition 1 is not held here")

    d = await co.route(req, True, "v", 1, 10, one)  # 421 NOT_ACTIVE, hops 0 (answers.py)
    assert isinstance(d, Refuse) and d.error.http_status == 421
    await co.close()


def test_role_is_derived_from_membership_at_most_every_ttl() -> None:
    """The answer's role stamp: active / standby / previous, from the assignment, which
    is re-derived at most every _ROLE_TTL (not once per lookup) and then followed."""
    co, _ = make(lambda req: None)
    assigned = {0: [ME, B], 1: [B, ME], 2: [C, B]}
    calls: list[tuple[str, int]] = []

    def assigned_to(view: str, p: int) -> list[str]:
        calls.append((view, p))
        return assigned[p]

    router: Any = co.node.router
    router.assigned = assigned_to
    assert [co.placement.role("v", p) for p in range(3)] == ["active", "standby", "previous"]
    assert co.placement.active_here("v", 0, 0) and not co.placement.active_here("v", 1, 0)
    assert len(calls) == 3  # one derivation for all the questions above
    assigned[0], assigned[1] = [B, ME], [ME, B]  # the assignment moves
    assert co.placement.role("v", 0) == "active"  # cached until the TTL passes
    co.placement.forget_roles()
    assert [co.placement.role("v", p) for p in range(3)] == ["standby", "active", "previous"]
    assert not co.placement.active_here("v", 0, 0)


def lookup(deadline_in: float) -> Ask:
    return Ask("lookup", {"view": "v", "key": "k"}, 3, None,
               asyncio.get_running_loop().time() + deadline_in)


async def test_replicas_that_all_failed_but_are_not_gone_are_walked_again() -> None:
    """A loaded machine: the owner of partition 1 does not accept the connection in time
    (a timeout) and then says it does not hold it (421); within the budget it is asked
    again and its answer is the query's. A replica that refused the connection (gone) is
    never asked again."""
    replies: list[Any] = [TimeoutError("connect"), PeerReply(421, b"{}"),
                          PeerReply(200, b'{"v": 1}')]
    seen: list[str] = []

    def handler(req: Sent) -> PeerReply:
        seen.append(req.address)
        got = replies.pop(0) if req.address == B else ConnectionRefusedError("refused")
        if isinstance(got, Exception):
            raise got
        return got  # type: ignore[no-any-return]

    co, _ = make(handler)

    async def here(h: Here) -> str:
        raise AssertionError("partition 1 is not held here")

    got = await co.route(lookup(30), False, "v", 1, 10, here)
    assert isinstance(got, Relayed) and got.reply.status == 200, got
    assert seen == [B, B, B] and co.traffic.unavailable == 0
    seen.clear()
    refused = await co.route(lookup(30), False, "v", 2, 10, here)  # C is gone: at once
    assert isinstance(refused, Refuse) and refused.error.http_status == 503
    assert seen == [C]
    await co.close()


async def test_a_scatter_gather_asks_a_replica_that_was_slow_again() -> None:
    calls: dict[str, int] = {B: 0, C: 0}

    def handler(req: Sent) -> PeerReply:
        calls[req.address] += 1
        if req.address == C:
            raise ConnectionRefusedError("refused")
        if calls[B] < 3:
            raise TimeoutError("connect")
        partial = {"found": {}, "keys": ["from b"]}
        return PeerReply(200, json.dumps({"partial": partial, "not_active": []}).encode())

    co, _ = make(handler)

    async def local(held: list[int]) -> MultiGetPartial:
        return {"found": {}, "keys": ["here"]}

    partials, missing, _hops = await co.gather(lookup(30), False, "v", [0, 1, 2], 10, local)
    assert sorted(k for p in partials for k in p["keys"]) == ["from b", "here"]
    assert missing == [2] and calls == {B: 3, C: 1}
    await co.close()


async def test_without_budget_for_another_round_the_refusal_comes_at_once() -> None:
    def handler(req: Sent) -> PeerReply:
        return PeerReply(421, b"{}")

    co, _ = make(handler)

    async def here(h: Here) -> str:
        raise AssertionError("not held here")

    got = await co.route(lookup(0.05), False, "v", 1, 10, here)
    assert isinstance(got, Refuse) and got.error.http_status == 503
    assert co.traffic.unavailable == 1  # answers, not walks
    await co.close()
