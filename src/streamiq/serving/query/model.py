"""Typed queries and their results, for any front end (HTTP today, SQL next).

A query names its view, its own parameters (a key, a range, aggregates...) and its
``Freshness``; its class's ``kind`` names it on the peer protocol (every subclass is
registered in ``KINDS`` as it is defined). The ``Caller`` says who asks (the client's
Authorization, which peers check again), whether the query is a peer's (``forwarded``,
with the ``partitions`` it must answer) and by when it must be answered
(``deadline``). Results are typed rows plus the partitions no replica could answer
(``missing``): never a silently wrong total.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Generic, NamedTuple, TypeVar

import orjson
from pydantic import AliasChoices, ConfigDict, Field

from streamiq.serving.engines.partials import P, ScannedRow

__all__ = ["FAR", "KINDS", "MAX_KEYS", "Aggregate", "AggregateRows", "Caller", "Changes",
           "Freshness",
           "Gathered", "KeyResult", "KeyWindows", "Lookup", "MultiGet", "MultiGetRows",
           "PeerPart", "Query", "Read", "Scan", "ScanRows", "WindowScan", "Windows"]

#: the end of time for window bounds (no upper bound given)
FAR = 1 << 62
#: the most keys one multi-get asks (an HTTP request's bound; SQL asks in parts of it)
MAX_KEYS = 1000
R = TypeVar("R")


@dataclass(frozen=True)
class Freshness:
    """How fresh an answer must be: a lag bound (None: the node's ``--max-lag``), a
    position to wait for (``topic:partition:offset[,...]``), a staleness bound (every
    input record appended more than ``max_staleness_ms`` before the read reflected) and
    the wait's bound."""

    #: how a peer's request is read back (``query/codec.py``): each field of its type
    __pydantic_config__ = ConfigDict(strict=True, extra="forbid")

    max_lag: int | None = None
    position: str | None = None
    wait_ms: int | None = None
    max_staleness_ms: int | None = None
    #: answer at one cut of the input (``serving/changelog/cuts.py``): the entry chooses
    #: it and sends it to its peers as ``cut`` (a position token)
    consistent: bool = False
    cut: str | None = None

    @property
    def waits(self) -> bool:
        """The answer may wait (a position, a staleness bound or a cut to reach)."""
        return bool(self.position) or self.max_staleness_ms is not None or self.consistent


@dataclass(frozen=True)
class Caller:
    """Who asks: the client's Authorization (sent on to peers); for a peer's query
    (``forwarded``) the partitions it must answer (a scatter-gather's part); and the
    ``deadline`` (the event loop's time; None: the node's default budget from now) past
    which nobody waits for the answer."""

    authorization: str | None = None
    forwarded: bool = False
    partitions: Sequence[int] | None = None
    deadline: float | None = None


#: every query type by its ``kind`` (the peer protocol's name for it)
KINDS: dict[str, type[Query]] = {}


@dataclass(frozen=True)
class Query:
    """A query: its view, its parameters (a subclass's fields, of any type pydantic
    reads from JSON strictly: ``str``, ``int``, ``float``, ``bool``, optional, tuples of
    them...) and its freshness."""

    kind: ClassVar[str] = ""
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(strict=True, extra="forbid")
    view: str
    fresh: Freshness = field(default_factory=Freshness, kw_only=True)

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if cls.__dict__.get("kind"):
            KINDS[cls.kind] = cls


@dataclass(frozen=True)
class Lookup(Query):
    """One key's row."""

    kind = "lookup"
    key: str


@dataclass(frozen=True)
class MultiGet(Query):
    """Many keys' rows (one call per owner)."""

    kind = "multiget"
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Scan(Query):
    """Rows in key order from ``start`` (inclusive) to ``to`` (exclusive) or with a
    ``prefix``, a page of ``limit`` resuming after ``cursor``."""

    kind = "scan"
    start: str | None = None
    to: str | None = None
    prefix: str | None = None
    limit: int = 100
    cursor: str | None = None


@dataclass(frozen=True)
class WindowScan(Query):
    """Windows of all keys (or a ``prefix``) starting in [start, end), paged."""

    kind = "window_scan"
    start: int = 0
    end: int = FAR
    prefix: str | None = None
    limit: int = 100
    cursor: str | None = None


@dataclass(frozen=True)
class KeyWindows(Query):
    """One key's windows starting in [start, end)."""

    kind = "windows"
    key: str
    start: int = 0
    end: int = FAR


@dataclass(frozen=True)
class Aggregate(Query):
    """``aggs`` (``FUNC(COLUMN)``; none: ``count(*)``) per group of ``group_by`` columns
    (each may be comma-separated; none: one group), over keys with ``prefix``."""

    kind = "aggregate"
    group_by: tuple[str, ...] = ()
    aggs: tuple[str, ...] = ()
    prefix: str | None = None


@dataclass(frozen=True)
class Changes(Query):
    """A live subscription's part on an owner (``serving/peer/changes.py``): the events
    of ``keys`` (or of keys with ``prefix``; neither: every key) of the partitions asked,
    from position ``start`` (a token; none: now), with a ``tail`` of the current values
    first when asked. Not run as a query: its owner answers it as a stream of frames. On
    the wire ``start`` is ``from`` (``codec.changes_request``)."""

    kind = "changes"
    keys: tuple[str, ...] | None = None
    prefix: str | None = None
    start: Annotated[str | None, Field(validation_alias=AliasChoices("from", "start"))] = None
    tail: bool = False


class Read(NamedTuple):
    """A key lookup answered here: 200 and the row's document, or 404 and its problem
    document (the bytes every path answers)."""

    status: int
    body: bytes

    @property
    def row(self) -> Any:
        """The row found (None: no row for the key)."""
        return orjson.loads(self.body)["value"] if self.status == 200 else None


@dataclass(frozen=True)
class KeyResult:
    key: str
    partition: int
    found: bool
    value: Any


@dataclass(frozen=True)
class MultiGetRows:
    results: list[KeyResult]
    missing_keys: list[str]  # keys whose partition no replica answered


@dataclass(frozen=True)
class ScanRows:
    rows: list[ScannedRow]
    next_cursor: str | None


@dataclass(frozen=True)
class AggregateRows:
    group_by: list[str]
    aggregates: list[str]
    groups: list[dict[str, Any]]
    rows: int  # rows folded


@dataclass(frozen=True)
class Windows:
    """A key's windows (``stamp``: who answered, its role and lag; ``hops``: 0 here, 1
    from a replica)."""

    key: str
    partition: int
    windows: list[Any]
    stamp: dict[str, Any]
    hops: int = 0


@dataclass(frozen=True)
class Gathered(Generic[R]):
    """A scatter-gather's answer: the ``result`` over the partitions answered,
    ``partitions`` asked, the ``missing`` ones (no replica could answer them: PARTIAL),
    the hops it took (0: all here), the node that gathered it and, for a consistent
    read, the ``cut`` it reflects exactly (a position token)."""

    view: str
    result: R
    partitions: int
    missing: list[int]
    hops: int
    served_by: str
    cut: str | None = None

    @property
    def status(self) -> str:
        return "PARTIAL" if self.missing else "OK"


@dataclass(frozen=True)
class PeerPart(Generic[P]):
    """A peer's part of a scatter-gather answered here: the partial over what this node
    holds, and the partitions asked that it does not (``not_active``)."""

    partial: P | None
    not_active: list[int]
    served_by: str
