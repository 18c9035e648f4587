"""One error hierarchy, mapped to HTTP and to the lookup wire in one place each."""

from __future__ import annotations

import pytest

from streamiq._http import error_response
from streamiq.errors import (
    BadRequest,
    NotActive,
    NotFound,
    NotUpToBound,
    PeerTimeout,
    PeerUnreachable,
    StreamiqError,
    Unavailable,
    UnknownView,
)
from streamiq.serving.cluster.wire import answer


@pytest.mark.parametrize(("cls", "status", "code"), [
    (StreamiqError, 500, "INTERNAL"), (BadRequest, 400, "BAD_REQUEST"),
    (NotFound, 404, "NOT_FOUND"), (UnknownView, 404, "UNKNOWN_VIEW"),
    (NotActive, 421, "NOT_ACTIVE"), (Unavailable, 503, "UNAVAILABLE"),
    (NotUpToBound, 503, "NOT_UP_TO_BOUND")])
def test_each_error_carries_its_status_and_code(cls: type[StreamiqError], status: int,
                                                code: str) -> None:
    err = cls("what went wrong", partition=2)
    assert (err.http_status, err.code) == (status, code)
    assert err.body() == {  # an RFC 9457 problem document, extra members after
        "type": "urn:streamiq:problem:" + code.lower().replace("_", "-"),
        "title": code.replace("_", " ").title(), "status": status, "code": code,
        "detail": "what went wrong", "partition": 2}
    resp = error_response(err)  # HTTP: the same bytes the wire carries
    assert resp.status_code == status and bytes(resp.body) == err.render()
    assert resp.headers["content-type"] == "application/problem+json"
    assert isinstance(err, StreamiqError)


def test_the_wire_maps_raised_errors_like_http() -> None:
    def lookup(p: int, n: int, path: bytes, token: bytes) -> tuple[int, bytes]:
        if p == 0:
            raise NotActive("not mine", partition=0)
        if p == 1:
            raise RuntimeError("bug")
        return 200, b"{}"

    assert answer(lookup, 0, 3, b"/x", b"-") == (421, NotActive("not mine", partition=0).render())
    assert answer(lookup, 1, 3, b"/x", b"-") == (
        500, b'{"type":"urn:streamiq:problem:internal","title":"Internal","status":500,'
             b'"code":"INTERNAL","detail":"lookup failed"}')
    assert answer(lookup, 2, 3, b"/x", b"-") == (200, b"{}")


def test_peer_errors_name_the_peer_and_keep_the_cause() -> None:
    cause = ConnectionRefusedError("refused")
    err = PeerUnreachable("10.0.0.1:9001", cause)
    assert err.address == "10.0.0.1:9001" and err.cause is cause
    assert not isinstance(PeerTimeout("a:1", TimeoutError()), PeerUnreachable)
