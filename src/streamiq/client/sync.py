"""The client: ``AsyncClient`` in client/aio.py, written by hand, and ``Client`` in
client/sync.py, generated from aio.py by the ``unasync`` package (``make unasync``;
tests/unit/client/test_unasync.py checks it is up to date). Edit aio.py only, in
spellings that read the same once ``async``/``await`` are dropped and the names renamed
(hanging indents, one ``await`` per statement).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from typing import Any

import httpx

from streamiq.client._core import KEEPALIVE_S, Backoff, QueryError, Spec, SseReader, _Base, _fresh

__all__ = ["Client"]


class Client(_Base):
    """Query a streamiq cluster; key requests go straight to their owner.

    ``nodes`` are seed addresses (``host:port``, comma-separated or a list); the rest
    of the cluster is learned from ``/v1/cluster``. ``token`` (default: the
    ``STREAMIQ_TOKEN`` environment variable, else the demo token ``streamiq up`` saved in
    ``.streamiq/token``, found as the CLI finds it) goes with every request as a bearer
    token, and so do ``headers``. A refusal (400, 401, 403, 404...) is raised at once as
    ``QueryError``, saying for 401/403 which token was sent and how to get one;
    ``QueryError.transient`` tells what may pass by asking again. Seeds written
    ``https://host:port`` mean a cluster serving TLS; ``verify`` is a CA bundle's path
    (or False). ``client.last`` says who answered the
    last request and with how many hops. One connection pool with keep-alive per client.
    """

    def __init__(self, nodes: str | Iterable[str], *, token: str | None = None,
                 headers: dict[str, str] | None = None,
                 timeout: float = 10.0, metadata_ttl: float = 30.0, retries: int = 3,
                 max_connections: int = 100, verify: bool | str = True,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(nodes, metadata_ttl)
        self.retries = retries
        self._http = httpx.Client(
            headers=self._auth(headers, token), timeout=httpx.Timeout(timeout, connect=1.0),
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections,
                                keepalive_expiry=KEEPALIVE_S),
            verify=verify, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- plumbing --
    def refresh(self) -> None:
        """Reload partition counts and ownership from the first node that answers; a
        refusal (401, 403...) is raised at once, before any other request."""
        for node in self._meta_order():
            try:
                got_views = self._http.get(f"{self.scheme}://{node}/v1/views")
                views = self._meta_doc(node, got_views)
                got_cluster = self._http.get(f"{self.scheme}://{node}/v1/cluster")
                cluster = self._meta_doc(node, got_cluster)
            except (httpx.HTTPError, ValueError):
                self._failed(node)
                continue
            self._apply(views, cluster)
            return

    def _run(self, spec: Spec, not_found_ok: bool = False) -> Any:
        if self._needs_refresh():
            self.refresh()
        tried: set[str] = set()
        error: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt == 0:
                node = self._first(spec)
            else:
                candidates = self._candidates(spec, tried)
                if not candidates:
                    break
                node = candidates[0]
            tried.add(node)
            try:
                r = self._http.request(
                    spec.method, f"{self.scheme}://{node}{spec.path}",
                    params=tuple(spec.params) or None, json=spec.json)
            except httpx.TransportError as exc:
                error = exc
                self._failed(node)
                self.refresh()
                continue
            if r.status_code == 421:  # the node does not hold it: our map is stale
                error = QueryError(421, r.json(), node)
                self._stale = True
                self.refresh()
                continue
            return self._result(node, r, not_found_ok)
        raise ConnectionError(f"no streamiq node answered ({error})")

    # -- queries --
    def views(self) -> list[dict[str, Any]]:
        doc = self._run(Spec("GET", "/v1/views"))
        views: list[dict[str, Any]] = doc["views"]
        return views

    def cluster(self) -> dict[str, Any]:
        doc: dict[str, Any] = self._run(Spec("GET", "/v1/cluster"))
        return doc

    def metadata(self, view: str, key: str) -> dict[str, Any]:
        doc: dict[str, Any] = self._run(self._metadata_spec(view, key))
        return doc

    def get(
            self, view: str, key: str, *, max_lag: int | None = None,
            position: str | None = None, wait_ms: int | None = None,
            max_staleness_ms: int | None = None) -> dict[str, Any] | None:
        """The row of ``key`` (body with ``value``), or None if the view has no such key.
        ``max_staleness_ms``: reflecting every input record appended that long before."""
        doc: dict[str, Any] | None = self._run(
            self._get_spec(view, key, max_lag, position, wait_ms, max_staleness_ms),
            not_found_ok=True)
        return doc

    def multi_get(
            self, view: str, keys: Sequence[str], *, max_lag: int | None = None,
            consistent: bool = False, max_staleness_ms: int | None = None,
            position: str | None = None, wait_ms: int | None = None) -> dict[str, Any]:
        """Each key's row; ``consistent``: all at one cut of the input (``cut``);
        ``position``: reflecting at least that token (a write's, or a ``cut``)."""
        doc: dict[str, Any] = self._run(self._multi_spec(
            view, keys, max_lag, _fresh(consistent, max_staleness_ms, position, wait_ms)))
        return doc

    def scan(
            self, view: str, *, start: str | None = None, end: str | None = None,
            prefix: str | None = None, limit: int = 100, cursor: str | None = None,
            max_lag: int | None = None, consistent: bool = False,
            max_staleness_ms: int | None = None, position: str | None = None,
            wait_ms: int | None = None) -> dict[str, Any]:
        """One page of rows in key order; pass ``next_cursor`` back to continue
        (``consistent``: every page at the first page's cut of the input)."""
        doc: dict[str, Any] = self._run(self._view_spec(
            view, "scan", start=start, end=end, prefix=prefix, limit=limit, cursor=cursor,
            max_lag=max_lag, **_fresh(consistent, max_staleness_ms, position, wait_ms)))
        return doc

    def scan_all(
            self, view: str, *, start: str | None = None, end: str | None = None,
            prefix: str | None = None, page: int = 500, allow_partial: bool = False,
            consistent: bool = False) -> Generator[dict[str, Any], None]:
        """Every row of the range, following cursors; raises QueryError on PARTIAL.
        ``consistent``: every page at the first page's cut of the input."""
        cursor = None
        while True:
            doc = self.scan(
                view, start=start, end=end, prefix=prefix, limit=page, cursor=cursor,
                consistent=consistent and cursor is None)
            if doc["status"] != "OK" and not allow_partial:
                raise QueryError(200, doc)
            for row in doc["rows"]:
                yield row
            cursor = doc["next_cursor"]
            if cursor is None:
                return

    def aggregate(
            self, view: str, aggs: Sequence[str] = ("count(*)",), *,
            group_by: str | Sequence[str] | None = None, prefix: str | None = None,
            max_lag: int | None = None, consistent: bool = False,
            max_staleness_ms: int | None = None, position: str | None = None,
            wait_ms: int | None = None) -> dict[str, Any]:
        """``aggregate("order_counts", ["sum(count)"], group_by="type")``;
        ``consistent``: at one cut of the input across every partition (``cut``)."""
        doc: dict[str, Any] = self._run(self._view_spec(
            view, "aggregate", group_by=group_by, agg=list(aggs), prefix=prefix,
            max_lag=max_lag, **_fresh(consistent, max_staleness_ms, position, wait_ms)))
        return doc

    def top(
            self, view: str, column: str, k: int = 10, *, order: str = "desc",
            prefix: str | None = None, max_lag: int | None = None, consistent: bool = False,
            max_staleness_ms: int | None = None, position: str | None = None,
            wait_ms: int | None = None) -> dict[str, Any]:
        """The ``k`` rows with the largest (``order="asc"``: smallest) ``column``:
        ``top("balances", "balance", 10)``, merged from each owner's top ``k``."""
        doc: dict[str, Any] = self._run(self._view_spec(
            view, "top", column=column, k=k, order=order, prefix=prefix, max_lag=max_lag,
            **_fresh(consistent, max_staleness_ms, position, wait_ms)))
        return doc

    def changes(
            self, view: str, *, key: str | Sequence[str] | None = None,
            prefix: str | None = None, position: str | None = None, idle_s: float = 60.0
            ) -> Generator[dict[str, Any], None]:
        """Each change of ``key`` (one or several), of the keys with ``prefix`` or of the
        whole view, as it happens (Server-Sent Events): the row as a lookup has it
        (``found``, ``value``, ``deleted``, ``coalesced``) and ``position``, the stream's
        position after it. Without ``position``: first each key's current value. After a
        dropped connection (or nothing for ``idle_s``) it resumes by itself from the last
        position, on any node: no gap, no duplicate; while every node refuses (421, 429,
        5xx) or is down it tries again after 0.1 s doubling to 5 s (with jitter), and
        raises any other refusal (400, 401, 403, 404) at once as ``QueryError``.
        ``{"reset": True}`` says the rows that follow replace everything held (a resume
        too far behind)."""
        spec = self._changes_spec(view, key, prefix)
        last = position
        backoff = Backoff()
        while True:
            node = self._first(spec)
            headers = {} if last is None else {"last-event-id": last}
            try:
                with self._http.stream(
                        "GET", f"{self.scheme}://{node}{spec.path}",
                        params=tuple(spec.params) or None, headers=headers,
                        timeout=httpx.Timeout(idle_s, connect=1.0)) as r:
                    if r.status_code >= 400:
                        r.read()
                        self._refused(node, r)
                    else:
                        reader = SseReader()
                        for line in r.iter_lines():
                            event = reader.line(line)
                            if event is None:
                                continue
                            backoff.reset()
                            last = event.get("position") or last
                            if event.get("event") is None or event.get("reset"):
                                yield event
            except httpx.TransportError:
                self._failed(node)
                self.refresh()
            self._sleep(backoff.next())

    def windows(
            self, view: str, key: str, start: int = 0, end: int | None = None, *,
            max_lag: int | None = None) -> dict[str, Any]:
        """``key``'s windows starting in [start, end) (epoch ms)."""
        doc: dict[str, Any] = self._run(self._windows_spec(view, key, start, end, max_lag))
        return doc

    def windows_range(
            self, view: str, start: int = 0, end: int | None = None, *,
            prefix: str | None = None, limit: int = 100, cursor: str | None = None,
            max_lag: int | None = None) -> dict[str, Any]:
        """One page of every key's windows starting in [start, end)."""
        doc: dict[str, Any] = self._run(self._view_spec(
            view, "windows", start=start, end=end, prefix=prefix, limit=limit, cursor=cursor,
            max_lag=max_lag))
        return doc
