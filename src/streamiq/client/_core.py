"""What the sync and async clients share: cluster metadata, owner choice, request specs.

The client caches ``/v1/views`` (partition counts) and ``/v1/cluster`` (who holds
which partition), computes a key's partition with Kafka's murmur2 partitioner and
sends key requests straight to the partition's active owner, so a fresh cache means
no extra hop. Anything else goes to any node. A connection error or NOT_ACTIVE (421)
marks the cache stale; the request is retried on the next candidate node.

Keys and view names go in the path percent-encoded whole (``quote(key, safe="")``),
so any string can be looked up: ``/`` travels as ``%2F`` and stays part of the key.
A key that is not valid Unicode (a lone surrogate) is sent as such and the node
answers 400 (``QueryError`` with ``code`` BAD_REQUEST).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from streamiq._saved import find_token
from streamiq.client._errors import TRANSIENT, QueryError
from streamiq.kafka.partitioner import partition_for

__all__ = ["KEEPALIVE_S", "QueryError", "Served", "Spec", "SseReader", "segment",
           "with_token"]

#: A node that refused a connection is tried last for this long (seconds).
DOWN_S = 5.0
#: A pooled connection idle this long is not reused (seconds): well under the time a node
#: keeps one open (``KEEP_ALIVE_S``, 75 s; 5 s in older nodes), as a request sent on one
#: as it closes is reset.
KEEPALIVE_S = 4.0
#: a subscription refused with these is tried again (another node, after a backoff)
RETRYABLE = (421, 429)


def with_token(headers: dict[str, str] | None, token: str | None) -> dict[str, str]:
    """``headers`` plus ``Authorization: Bearer`` with ``token`` (default: the
    ``STREAMIQ_TOKEN`` environment variable, else the demo token ``streamiq up`` saved in
    ``.streamiq/token``, as the CLI finds it; none when there is none)."""
    return _authorized(headers, token)[0]


def _authorized(headers: dict[str, str] | None, token: str | None) -> tuple[dict[str, str], str]:
    """``with_token``'s headers and where their token came from ("" for none)."""
    out = dict(headers or {})
    if any(k.lower() == "authorization" for k in out):
        return out, "the authorization header given"
    token, source = find_token(token)
    if token:
        out["authorization"] = f"Bearer {token}"
    return out, source


class Backoff:
    """The waits between a subscription's tries: none after a stream that delivered an
    event (resume at once, on another node if need be), then 0.1 s doubling up to 5 s
    while every try fails, each wait drawn in [half, whole] (jitter: clients refused
    together do not all come back together)."""

    FIRST, MOST = 0.1, 5.0

    def __init__(self) -> None:
        self.delay = 0.0

    def reset(self) -> None:
        self.delay = 0.0

    def next(self) -> float:
        wait = random.uniform(self.delay / 2, self.delay)
        self.delay = min(max(self.FIRST, self.delay * 2), self.MOST)
        return wait


class SseReader:
    """Server-Sent Events read line by line: ``line()`` returns an event once whole (a
    change's data with its ``position``; another event as ``{"event": kind, ...}``;
    ``{"reset": True}`` for a reset), None otherwise (comments: keepalives)."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self._id: str | None = None
        self._event: str | None = None

    def line(self, line: str) -> dict[str, Any] | None:
        if line == "":
            data, ident, kind = self._data, self._id, self._event
            self._data, self._id, self._event = [], None, None
            if not data and kind is None:
                return None
            doc = json.loads("\n".join(data)) if data else {}
            out: dict[str, Any] = doc if isinstance(doc, dict) else {"data": doc}
            if ident is not None:
                out["position"] = ident
            if kind == "reset":
                return {"reset": True}
            if kind is not None:
                out["event"] = kind
            return out
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        elif name == "event":
            self._event = value
        return None


@dataclass(frozen=True)
class Served:
    """Who answered the last request: node address, hops (0 direct), HTTP status."""

    node: str
    hops: int
    http_status: int


@dataclass
class Spec:
    """One logical request: path, params, body and the view/key that pick its node."""

    method: str
    path: str
    params: list[tuple[str, Any]] = field(default_factory=list)
    json: Any = None
    view: str | None = None
    keys: Sequence[str] = ()


def segment(text: str) -> str:
    """``text`` as one path segment: every character but ``A-Za-z0-9_.-~``
    percent-encoded as UTF-8 (a lone surrogate as the bytes it would be, which the node
    refuses by name), and the dots of ``.`` or ``..`` too (HTTP clients resolve those)."""
    if text in (".", ".."):
        return text.replace(".", "%2E")
    return quote(text, safe="", errors="surrogatepass")


def _address(node: str) -> str:
    node = node.strip()
    for scheme in ("http://", "https://"):
        if node.startswith(scheme):
            node = node[len(scheme):]
    return node.rstrip("/")


def _fresh(consistent: bool, max_staleness_ms: int | None, position: str | None = None,
           wait_ms: int | None = None) -> dict[str, Any]:
    """A read's ``consistent``, ``max_staleness_ms``, ``position`` and ``wait_ms``
    parameters (left out when off)."""
    return {"consistent": "true" if consistent else None, "max_staleness_ms": max_staleness_ms,
            "position": position, "wait_ms": wait_ms}


def _params(**kw: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in kw.items():
        if v is None:
            continue
        name = {"start": "from", "end": "to"}.get(k, k)
        if isinstance(v, list | tuple):
            out += [(name, x) for x in v]
        else:
            out.append((name, v))
    return out


class _Base:
    def __init__(self, nodes: str | Iterable[str], metadata_ttl: float) -> None:
        seeds = nodes.split(",") if isinstance(nodes, str) else list(nodes)
        # https:// on a seed: the cluster serves TLS (every node does, or none)
        self.scheme = "https" if any(n.strip().startswith("https://") for n in seeds) \
            else "http"
        self._nodes: list[str] = [_address(n) for n in seeds if n.strip()]
        if not self._nodes:
            raise ValueError("give at least one node address (host:port)")
        self.metadata_ttl = metadata_ttl
        self._counts: dict[str, int] = {}
        self._owners: dict[str, dict[int, str]] = {}
        self._fetched = 0.0
        self._stale = True
        self._down: dict[str, float] = {}
        self._rr = 0
        self.last: Served | None = None
        self._token_from = ""  # where the token sent came from, for a 401's message

    def _auth(self, headers: dict[str, str] | None, token: str | None) -> dict[str, str]:
        """The headers every request carries, the token found as ``with_token`` does."""
        out, self._token_from = _authorized(headers, token)
        return out

    # -- metadata --
    def _needs_refresh(self) -> bool:
        return self._stale or time.monotonic() - self._fetched > self.metadata_ttl

    def _apply(self, views: dict[str, Any], cluster: dict[str, Any]) -> None:
        self._counts = {v["name"]: int(v["partitions"]) for v in views.get("views", [])}
        owners: dict[str, dict[int, str]] = {}
        for view, parts in cluster.get("views", {}).items():
            for p, pv in parts.items():
                reps = [r["address"] for r in pv.get("replicas", [])]
                owner = reps[0] if reps else (pv.get("assigned") or [None])[0]
                if owner:
                    owners.setdefault(view, {})[int(p)] = owner
        self._owners = owners
        known = [n["endpoint"] for n in cluster.get("nodes", [])]
        self._nodes = list(dict.fromkeys([*known, *self._nodes]))
        self._fetched = time.monotonic()
        self._stale = False

    def _meta_order(self) -> list[str]:
        now = time.monotonic()
        return sorted(self._nodes, key=lambda n: self._down.get(n, 0) > now - DOWN_S)

    def partition(self, view: str, key: str) -> int | None:
        """A key's partition (None until the view's partition count is known, or for a
        key that is not valid Unicode: any node answers it with a 400)."""
        n = self._counts.get(view)
        try:
            return partition_for(key.encode(), n) if n else None
        except UnicodeEncodeError:
            return None

    def owner(self, view: str, key: str) -> str | None:
        p = self.partition(view, key)
        return None if p is None else self._owners.get(view, {}).get(p)

    def _first(self, spec: Spec) -> str:
        """The node to try first: the key's owner when known and not down (hot path)."""
        if spec.view is not None and len(spec.keys) == 1:
            owner = self.owner(spec.view, spec.keys[0])
            if owner is not None and (owner not in self._down
                                      or self._down[owner] < time.monotonic() - DOWN_S):
                return owner
        return self._candidates(spec, set())[0]

    def _candidates(self, spec: Spec, tried: set[str]) -> list[str]:
        preferred: list[str] = []
        if spec.view is not None and spec.keys:
            votes: dict[str, int] = {}
            for k in spec.keys:
                o = self.owner(spec.view, k)
                if o is not None:
                    votes[o] = votes.get(o, 0) + 1
            preferred = sorted(votes, key=lambda o: -votes[o])
        self._rr = (self._rr + 1) % len(self._nodes)
        rotated = self._nodes[self._rr:] + self._nodes[:self._rr]
        now = time.monotonic()
        rest = sorted(rotated, key=lambda n: self._down.get(n, 0) > now - DOWN_S)
        return [n for n in dict.fromkeys([*preferred, *rest]) if n not in tried]

    def _failed(self, node: str) -> None:
        self._down[node] = time.monotonic()
        self._stale = True

    def _result(self, node: str, r: httpx.Response, not_found_ok: bool) -> Any:
        self.last = Served(node, int(r.headers.get("x-streamiq-hops", "0")), r.status_code)
        try:
            body = r.json()
        except ValueError:
            body = r.text
        if r.status_code == 404 and not_found_ok and isinstance(body, dict) \
                and body.get("code") == "NOT_FOUND":
            return None
        if r.status_code >= 400:
            raise QueryError(r.status_code, body, node, self._token_from)
        return body

    def _meta_doc(self, node: str, r: httpx.Response) -> Any:
        """A metadata answer's document; a refusal (401, 403, a 404 from something that
        is not a streamiq node) raised at once as ``QueryError``, since no other node of
        the same cluster answers it otherwise; a node that cannot answer now (421, 429,
        5xx) is a ValueError: the next one is asked."""
        if r.status_code >= 400 and r.status_code not in TRANSIENT and r.status_code < 500:
            self._result(node, r, False)
        if r.status_code >= 400:
            raise ValueError(f"{node} answered {r.status_code}")
        return r.json()

    # -- request specs --
    @staticmethod
    def _key_path(view: str, key: str, suffix: str = "") -> str:
        return f"/v1/views/{segment(view)}/keys/{segment(key)}{suffix}"

    def _get_spec(self, view: str, key: str, max_lag: int | None, position: str | None,
                  wait_ms: int | None, max_staleness_ms: int | None = None) -> Spec:
        return Spec("GET", self._key_path(view, key),
                    _params(max_lag=max_lag, position=position, wait_ms=wait_ms,
                            max_staleness_ms=max_staleness_ms), None, view, (key,))

    def _multi_spec(self, view: str, keys: Sequence[str], max_lag: int | None,
                    fresh: dict[str, Any] | None = None) -> Spec:
        return Spec("POST", f"/v1/views/{segment(view)}/keys",
                    _params(max_lag=max_lag, **(fresh or {})), {"keys": list(keys)}, view,
                    list(keys))

    @staticmethod
    def _view_spec(view: str, what: str, **params: Any) -> Spec:
        return Spec("GET", f"/v1/views/{segment(view)}/{what}", _params(**params))

    @staticmethod
    def _metadata_spec(view: str, key: str) -> Spec:
        return Spec("GET", f"/v1/metadata/{segment(view)}/{segment(key)}")

    def _changes_spec(self, view: str, key: str | Sequence[str] | None,
                      prefix: str | None) -> Spec:
        keys = [key] if isinstance(key, str) else list(key or ())
        return Spec("GET", f"/v1/views/{segment(view)}/changes",
                    _params(key=keys or None, prefix=prefix), None, view, keys)

    def _refused(self, node: str, r: httpx.Response) -> None:
        """A subscription refused: another node is tried, after a backoff, for what a node
        cannot serve now (421, 429 too many subscriptions, 5xx); any other 4xx (400, 401,
        403, 404...) is the caller's, raised at once (``QueryError``)."""
        if r.status_code not in RETRYABLE and r.status_code < 500:
            self._result(node, r, False)
        self._failed(node)

    @staticmethod
    async def _asleep(seconds: float) -> None:
        await asyncio.sleep(seconds)

    @staticmethod
    def _sleep(seconds: float) -> None:
        time.sleep(seconds)

    def _windows_spec(self, view: str, key: str, start: int, end: int | None,
                      max_lag: int | None) -> Spec:
        return Spec("GET", self._key_path(view, key, "/windows"),
                    _params(start=start, end=end, max_lag=max_lag), None, view, (key,))
