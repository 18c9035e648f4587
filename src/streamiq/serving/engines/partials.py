"""What nodes send each other in a scatter-gather: typed partial answers.

An entry node asks each replica for its part of a query over an explicit list of
partitions (a request of the peer protocol, ``serving/cluster/wire.py``); the replica
answers a ``GatherReply``: its partial, and the partitions it was asked for but cannot answer
(the entry asks another replica for those). A partial's shape is its query's: the
engine that makes it (``engines/scan.py``, ``engines/aggregate.py``, the multi-get in
``query/run.py``) and the merge that reads it share the type below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypedDict, TypeVar

__all__ = ["AggregatePartial", "GatherReply", "MultiGetPartial", "P", "ScanPartial",
           "ScannedRow"]


class ScannedRow(TypedDict):
    key: str
    partition: int
    value: dict[str, Any]


class ScanPartial(TypedDict):
    """Up to ``limit`` rows of the range from each partition asked, in key order per
    partition; ``more``: some partition had rows beyond the limit."""

    rows: list[ScannedRow]
    more: bool


class AggregatePartial(TypedDict):
    """Per group (its values as a JSON list), one fold state per aggregate; ``rows``:
    rows folded."""

    groups: dict[str, list[Any]]
    rows: int


class MultiGetPartial(TypedDict):
    """The asked keys found (key -> row) and every key this part answered for."""

    found: dict[str, Any]
    keys: list[str]


#: a query's partial: a JSON object (``ScanPartial``... or a query type's own, e.g. top-k's)
P = TypeVar("P", bound=Mapping[str, Any])


class GatherReply(TypedDict, Generic[P]):
    """A node's answer to a forwarded scatter-gather request."""

    partial: P | None
    not_active: list[int]
