"""Multi-key, scan, aggregate and window queries (scatter-gather by partition)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter

if TYPE_CHECKING:
    from streamiq.serving.app import NodeDeps

__all__ = ["query_routes"]


def query_routes(deps: NodeDeps) -> APIRouter:
    return APIRouter()
