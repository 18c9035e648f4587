"""Calls to peers: the one HTTP hop carries the mark and the client's token, a lookup
falls back from the wire to it, and every transport failure is a PeerError."""

from __future__ import annotations

from typing import Any

import pytest

from streamiq.config import Settings
from streamiq.errors import PeerError, PeerTimeout, PeerUnreachable
from streamiq.serving.cluster.hop import HopReply
from streamiq.serving.cluster.peers import Ask, Params, Peers, Reply
from streamiq.serving.cluster.wire import WireUnsupported


def peers(reply: Any, suspects: list[str] | None = None) -> tuple[Peers, list[Any]]:
    sent: list[Any] = []

    async def send(method: str, address: str, path: str, params: Params, body: Any,
                   headers: dict[str, str], timeout: float) -> Reply:
        sent.append((method, address, path, headers))
        if isinstance(reply, BaseException):
            raise reply
        assert isinstance(reply, Reply)
        return reply

    return Peers(Settings(auth=False), "m", (suspects if suspects is not None else []).append,
                 send=send), sent


async def test_one_http_hop_carries_the_mark_and_the_token() -> None:
    p, sent = peers(Reply(200, {"x-streamiq-served-by": "b"}, b"{}"))
    r = await p.send("b:1", Ask("GET", "/v1/x%2Fy", authorization="Bearer t", timeout=1.0))
    assert r.status_code == 200
    hop = await p.http_hop("b:1", "/v1/x", {"x-streamiq-forwarded": "m"})
    assert hop.headers == {b"x-streamiq-served-by": b"b"} and hop.body == b"{}"
    assert sent[0] == ("GET", "b:1", "/v1/x%2Fy",
                       {"x-streamiq-forwarded": "m", "authorization": "Bearer t"})
    assert p.hop_stats()["http"] == 1


async def test_a_lookup_takes_the_http_hop_when_the_wire_is_refused() -> None:
    p, sent = peers(Reply(404, {}, b"no"))

    async def no_wire(address: str, frame: bytes, timeout: float = 0) -> HopReply:
        raise WireUnsupported("HTTP/1.1 400")

    p.hop.fetch = no_wire  # type: ignore[method-assign]
    got = await p.forward_lookup("b:1", b"0 3 /k -\n", b"/k", b"Bearer t")
    assert (got.status, got.body) == (404, b"no")
    assert sent == [("GET", "b:1", "/k", {"x-streamiq-forwarded": "m",
                                           "authorization": "Bearer t"})]


@pytest.mark.parametrize(("exc", "kind", "suspect"), [
    (ConnectionRefusedError(), PeerUnreachable, True),
    (TimeoutError(), PeerTimeout, False)])
async def test_transport_failures_are_peer_errors(exc: BaseException, kind: type[PeerError],
                                                  suspect: bool) -> None:
    suspects: list[str] = []
    p, _ = peers(exc, suspects)
    with pytest.raises(kind) as got:
        await p.send("b:1", Ask("GET", "/", timeout=1.0))
    with pytest.raises(kind):
        await p.forward_lookup("b:1", None, b"/k", None)  # the lookup's HTTP hop

    async def wire_fails(address: str, frame: bytes, timeout: float = 0) -> HopReply:
        raise exc

    p.hop.fetch = wire_fails  # type: ignore[method-assign]
    with pytest.raises(kind):
        await p.forward_lookup("b:1", b"0 3 /k -\n", b"/k", None)  # the wire
    p.unreachable(got.value)
    assert suspects == (["b:1"] if suspect else [])
