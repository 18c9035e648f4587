"""One error hierarchy, mapped to HTTP and to the peer protocol in one place each."""

from __future__ import annotations

import pytest

from streamiq._fastapi import error_response
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


def test_the_peer_protocol_carries_errors_typed_both_ways() -> None:
    """A peer's error reply is its HTTP problem document (``codec.reply``), read back
    into the same class with its detail and members (``from_problem``)."""
    from streamiq.errors import DeadlineExceeded, NotUpToBound, from_problem
    from streamiq.serving.query.codec import reply

    for err in (NotActive("not mine", partition=0), NotUpToBound("late", partition=2),
                DeadlineExceeded("too slow"), BadRequest("no such column", field="agg")):
        status, body = reply(err)
        assert (status, body) == (err.http_status, err.render())
        back = from_problem(status, body)
        assert type(back) is type(err) and back.message == err.message
        assert back.http_status == err.http_status and back.extra == err.extra
    odd = from_problem(502, b"<html>bad gateway</html>")  # not a problem document
    assert type(odd) is StreamiqError and odd.http_status == 502 and "bad gateway" in odd.message


def test_peer_errors_name_the_peer_and_keep_the_cause() -> None:
    cause = ConnectionRefusedError("refused")
    err = PeerUnreachable("10.0.0.1:9001", cause)
    assert err.address == "10.0.0.1:9001" and err.cause is cause
    assert not isinstance(PeerTimeout("a:1", TimeoutError()), PeerUnreachable)
