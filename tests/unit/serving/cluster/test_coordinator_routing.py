"""Coordinator: partition-exact fan-out, Authorization travels, forwarded never forwards."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from streamiq.config import Settings
from streamiq.routing.memory import StaticMembership
from streamiq.routing.router import Endpoint
from streamiq.serving.cluster.coordinator import Coordinator
from streamiq.serving.cluster.peers import Ask, PeerReply
from streamiq.serving.cluster.placement import Here, Refuse
from streamiq.serving.engines.partials import MultiGetPartial

ME, B, C = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
OWNER = {0: ME, 1: B, 2: C}


class FakeRouter:
    global_views: frozenset[str] = frozenset()

    def replicas(self, view: str, p: int, max_lag: int) -> list[Endpoint]:
        return [Endpoint(OWNER[p], "active", 0)]

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
