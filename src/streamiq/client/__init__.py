"""Python clients for a streamiq cluster: ``Client`` (sync) and ``AsyncClient`` (asyncio).

Both cache the cluster map, compute a key's partition with Kafka's partitioner and go
straight to its owner (no extra hop), falling back to any node when the map is stale.
"""

from __future__ import annotations

from streamiq.client._core import QueryError, Served
from streamiq.client.aio import AsyncClient
from streamiq.client.sync import Client

__all__ = ["AsyncClient", "Client", "QueryError", "Served"]
