"""The peer protocol's frames: one typed request, one typed reply, on one transport.

Every call from one node to another (forwarded lookups, a key's windows, the parts of
multi-gets, scans, aggregates, top-k, what SQL pushes down) is one request frame on a
pooled connection to the peer's own HTTP port; peers never call the public HTTP API.
A connection opens with ``PREFACE`` and the cluster credential
(``streamiq.auth.hop_mark``) on a line of its own; a connection without it gets one 401
reply and is closed, before any request. The node's HTTP protocol sees the preface in
the connection's first bytes and hands the connection to the peer server
(``serving/peer/server.py``); anything else stays HTTP. Then frames::

    request  !III  body length, request id, budget in ms   + body
    reply    !IIH  body length, request id, status          + body

A request's body is one JSON document (orjson)::

    {"k": kind, "q": {the typed query's fields}, "p": [partitions], "n": partition
     count, "t": the client's token or null}

``kind`` names the typed query (``serving/query/codec.py``), ``p`` the partitions the
peer answers (one for a lookup), ``n`` the view's partition count the entry computed
them with (the owner refuses with 421 unless it counts the same), ``t`` the client's
bearer token, which the owner checks again, and the budget the time the caller has
left: the peer gives up (and answers 504) past it. A reply's status says what its body
is: 200 the typed answer (a row document, a key's windows, a part of a scatter-gather),
404 a lookup's "no row" document, anything else a typed error as its problem document
(``errors.from_problem`` reads it back). Replies carry their request's id, so a late
reply (after a hedge won, or past the budget) is never taken for another's.

One kind is a stream, not a call: ``changes`` (a live subscription, issue 40) is
answered by many replies under its request's id, one per event, until the subscription
ends or the connection closes; the entry node opens a connection of its own for each
(``serving/changes/upstream.py``; the owner's side ``serving/peer/changes.py``).

Why this wire and not gRPC: bench/bench_peer_transport.py, docs/design.md ("The peer
protocol").
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import orjson

__all__ = ["END", "HEADER", "MAX_REQUEST", "PART", "PREFACE", "PREPARING", "REPLY", "REQUEST",
           "PeerReply", "Request", "reply_frame", "request_body", "request_frame"]

PREFACE = b"STREAMIQ-PEER/2\n"
REQUEST = struct.Struct("!III")  # body length, request id, budget ms
REPLY = struct.Struct("!IIH")  # body length, request id, status
#: the statuses of a snapshot stream's frames (``serving/peer/snapshots.py`` sends,
#: ``serving/cluster/copy.py`` receives): still exporting, the header, a part, the end
PREPARING, HEADER, PART, END = 202, 200, 206, 204
MAX_REQUEST = 8 * 1024 * 1024  # a request body past this closes the connection
MAX_BUDGET_MS = (1 << 32) - 1


class PeerReply(NamedTuple):
    """A peer's answer: its status and body (a tuple: one per call, on the hot path)."""

    status: int
    body: bytes


class Request(NamedTuple):
    """A request as the peer server reads it."""

    rid: int
    budget_ms: int
    doc: dict[str, Any]


def request_body(kind: str, query: Any, partitions: list[int], count: int,
                 token: str | None) -> bytes:
    """The JSON body of a request (``query``: the typed query's fields as JSON values)."""
    return orjson.dumps({"k": kind, "q": query, "p": partitions, "n": count, "t": token})


def request_frame(rid: int, budget_ms: int, body: bytes) -> bytes:
    return REQUEST.pack(len(body), rid, max(0, min(budget_ms, MAX_BUDGET_MS))) + body


def reply_frame(rid: int, status: int, body: bytes) -> bytes:
    return REPLY.pack(len(body), rid, status) + body
