"""Typed queries and their answers on the peer protocol: what a peer is asked, what it
answers, and both read back.

A request carries the typed query as its ``kind`` (``Query.kind``) and its fields
(orjson writes a dataclass as its fields); ``decode`` makes the same query again for
the peer server, each field read as its type strictly (pydantic, from the dataclass's
own annotations: a new query type's fields of any JSON type need nothing here). An
answer is rendered by its type (``reply``: a key's row, a key's windows, a peer's part
of a scatter-gather, an error), and ``windows`` reads a replica's windows back. A new
query type needs nothing here unless it answers with a new type of result (register it
with ``reply.register``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from streamiq.errors import BadRequest, StreamiqError, from_problem
from streamiq.serving.cluster.peers import Ask, PeerReply
from streamiq.serving.cluster.wire import request_body
from streamiq.serving.engines.partials import GatherReply
from streamiq.serving.query.model import KINDS, Changes, PeerPart, Query, Read, Windows

__all__ = ["ask", "changes", "changes_request", "decode", "lookup_ask", "read",
           "read_lookup", "reply", "windows"]

#: each query type's validator, by kind (made at its first request)
_ADAPTERS: dict[str, TypeAdapter[Query]] = {}


def ask(q: Query, authorization: str | None, count: int, deadline: float,
        part: Callable[[list[int]], Query] | None = None) -> Ask:
    """What peers are asked for ``q`` (``part``: the query for the partitions one peer
    answers, e.g. a multi-get of their keys)."""
    return Ask(q.kind, q, count, authorization, deadline, part)


def lookup_ask(view: str, key: str, count: int, authorization: str | None,
               deadline: float) -> Ask:
    """What peers are asked for a plain key lookup (the lean path's): the view and the
    key only, no typed query built (the owner answers it inline, ``peer/server.py``; a
    lookup with a freshness goes as its typed query)."""
    return Ask("lookup", {"view": view, "key": key}, count, authorization, deadline)


def changes_request(q: Changes, partitions: list[int], count: int,
                    authorization: str | None) -> bytes:
    """A subscription's request to an owner (``decode`` reads it back as ``Changes``);
    its position goes as ``from``, the name every node has read it by."""
    fields = {"view": q.view, "keys": q.keys, "prefix": q.prefix, "tail": q.tail,
              "from": q.start}
    return request_body("changes", fields, partitions, count, authorization)


def changes(fields: Any) -> Changes:
    """A subscription's request read back (``decode``'s rules: strict, ``from`` or
    ``start``); ``BadRequest`` naming what does not fit."""
    q = decode(Changes.kind, fields)
    assert isinstance(q, Changes)
    return q


def read_lookup(doc: Any) -> tuple[str, str, int, int, str | None]:
    """A lookup request read back on the owner's hot path (without pydantic: checked by
    hand, as strictly): its view, key, partition, the view's partition count and the
    client's token; ``BadRequest`` when anything is missing or of another type."""
    try:
        q, (p,), count, token = doc["q"], doc["p"], doc["n"], doc["t"]
        name, key, fresh = q["view"], q["key"], q.get("fresh") or {}
        max_lag = fresh.get("max_lag")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise BadRequest("malformed lookup request") from None
    if not (type(name) is str and type(key) is str and type(p) is int
            and type(count) is int and (max_lag is None or type(max_lag) is int)
            and (token is None or type(token) is str)):
        raise BadRequest("malformed lookup request")
    return name, key, p, count, token


def decode(kind: str, fields: Any) -> Query:
    """The typed query a peer's request names, each field checked against its type as
    JSON reads it, strictly (pydantic: ``"3"`` is no ``int``, ``1`` no ``bool``; unknown
    fields refused); ``BadRequest`` naming the first field that does not fit."""
    cls = KINDS.get(kind)
    if cls is None or not isinstance(fields, dict):
        raise BadRequest(f"not a query of this node: {kind!r}")
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _ADAPTERS[kind] = TypeAdapter(cls)
    try:
        return adapter.validate_json(orjson.dumps(fields))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "query"
        raise BadRequest(f"malformed {kind} query: {where}: {first['msg']}") from None



@functools.singledispatch
def reply(answer: Any) -> tuple[int, bytes]:
    """A peer's answer on the protocol: its status and body."""
    raise TypeError(f"no peer reply for {type(answer).__name__}")


@reply.register
def _read(answer: Read) -> tuple[int, bytes]:
    return answer.status, answer.body  # a row's document, or its 404's


@reply.register
def _windows(answer: Windows) -> tuple[int, bytes]:
    return 200, orjson.dumps({"key": answer.key, "partition": answer.partition,
                              "windows": answer.windows, **answer.stamp})


@reply.register
def _part(answer: PeerPart) -> tuple[int, bytes]:  # type: ignore[type-arg]
    doc: GatherReply[Any] = {"partial": answer.partial, "not_active": answer.not_active}
    return 200, orjson.dumps(doc)


@reply.register
def _error(answer: StreamiqError) -> tuple[int, bytes]:
    return answer.http_status, answer.render()


def read(r: PeerReply) -> Read:
    """A replica's answer to a key lookup: its row (200) or none (404); any other reply
    raised as the error it names."""
    if r.status not in (200, 404):
        raise from_problem(r.status, r.body)
    return Read(r.status, r.body)


def windows(r: PeerReply) -> Windows:
    """A replica's windows (its error reply raised as the error it names)."""
    if r.status != 200:
        raise from_problem(r.status, r.body)
    doc = orjson.loads(r.body)
    stamp = {k: doc[k] for k in ("served_by", "role", "lag")}
    return Windows(doc["key"], doc["partition"], doc["windows"], stamp, hops=1)
