"""Calls to peers: one request of the peer protocol carries the typed query, the
partitions, the client's credential and the deadline; every transport failure is a
PeerError; each answer's latency feeds the hedge delays."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamiq.config import Settings
from streamiq.errors import PeerError, PeerTimeout, PeerUnreachable
from streamiq.serving.cluster.peers import Ask, PeerReply, Peers


def peers(reply: Any, suspects: list[str] | None = None) -> tuple[Peers, list[Any]]:
    sent: list[Any] = []

    async def send(address: str, body: bytes, deadline: float) -> PeerReply:
        sent.append((address, json.loads(body), deadline))
        if isinstance(reply, BaseException):
            raise reply
        assert isinstance(reply, PeerReply)
        return reply

    return Peers(Settings(auth=False), "m", (suspects if suspects is not None else []).append,
                 send=send), sent


async def test_one_request_carries_the_query_the_partitions_the_token_and_the_deadline(
        ) -> None:
    p, sent = peers(PeerReply(200, b"{}"))
    ask = Ask("scan", {"view": "v", "prefix": "x/y"}, 3, "Bearer t", 123.5,
              part=lambda ps: {"view": "v", "only": ps})
    r = await p.ask("b:1", ask, [0, 2])
    assert r == PeerReply(200, b"{}")
    assert sent == [("b:1", {"k": "scan", "q": {"view": "v", "only": [0, 2]}, "p": [0, 2],
                             "n": 3, "t": "Bearer t"}, 123.5)]
    assert p.stats()["replies"] == 0  # the test's transport, not the pooled client


@pytest.mark.parametrize(("exc", "kind", "suspect"), [
    (ConnectionRefusedError(), PeerUnreachable, True),
    (ConnectionResetError(), PeerUnreachable, True),
    (TimeoutError(), PeerTimeout, False)])
async def test_transport_failures_are_peer_errors(exc: BaseException, kind: type[PeerError],
                                                  suspect: bool) -> None:
    suspects: list[str] = []
    p, _ = peers(exc, suspects)
    with pytest.raises(kind) as got:
        await p.ask("b:1", Ask("lookup", {}, 3, None, 1.0), [0])
    p.unreachable(got.value)
    assert suspects == (["b:1"] if suspect else [])  # a slow peer is retried, not blamed
