"""What a token sees of the cluster's metadata (``/v1/views``, ``/v1/cluster``, the
dashboard's snapshot and events, ``/v1/pipeline``).

A token with ``cluster:read`` (or ``views:*``, which includes it) sees everything. Any
other token sees the views it may read (``views:NAME``) and nothing else: their
descriptions, their partition map, the nodes holding or assigned their partitions
(with those partitions only) and the pipeline's progress for them. Cluster-wide
fields (this node's health, its traffic and latency, records skipped on the progress
topic, the state of ``streamiq up``'s parts) are left out of its answers.
``Principal.may_see`` (``streamiq/auth.py``) is the rule; this module applies it to each
document.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from streamiq.auth import Principal

__all__ = ["CLUSTER_ONLY", "cluster_map", "progress_of", "seen_views", "snapshot_for"]

#: the dashboard snapshot's fields about the whole node, shown with cluster:read only
CLUSTER_ONLY = ("health", "traffic", "latency", "up")


def seen_views(who: Principal, names: Iterable[str]) -> frozenset[str] | None:
    """The views ``who`` sees among ``names``; None: everything (cluster:read)."""
    if who.may_see_cluster():
        return None
    return frozenset(n for n in names if who.may_see(n))


def cluster_map(meta: Mapping[str, Any], seen: frozenset[str] | None) -> dict[str, Any]:
    """``Router.metadata()`` (nodes, views) cut to the views in ``seen``: a node is
    listed when it holds or is assigned one of their partitions, with those only."""
    if seen is None:
        return dict(meta)
    views = {v: parts for v, parts in meta["views"].items() if v in seen}
    named = {a for parts in views.values() for pv in parts.values()
             for a in (*pv["assigned"], *(r["address"] for r in pv["replicas"]))}
    nodes = []
    for n in meta["nodes"]:
        held = {v: ps for v, ps in n["partitions"].items() if v in seen}
        if held or n["endpoint"] in named:
            nodes.append({**n, "partitions": held})
    return {"nodes": nodes, "views": views}


def progress_of(progress: Mapping[str, Any], seen: frozenset[str] | None) -> dict[str, Any]:
    """A document per view (the pipeline's progress, freshness), cut to the views in
    ``seen``."""
    return dict(progress) if seen is None else {v: p for v, p in progress.items() if v in seen}


def snapshot_for(snap: Mapping[str, Any], seen: frozenset[str] | None) -> dict[str, Any]:
    """A dashboard snapshot as a token that sees ``seen`` may see it."""
    if seen is None:
        return dict(snap)
    out = {k: v for k, v in snap.items() if k not in CLUSTER_ONLY}
    out["cluster"] = cluster_map(snap["cluster"], seen)
    out["pipeline"] = progress_of(snap["pipeline"], seen)
    out["freshness"] = progress_of(snap.get("freshness", {}), seen)
    return out
