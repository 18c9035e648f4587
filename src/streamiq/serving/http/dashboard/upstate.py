"""What ``streamiq up`` says of its parts (broker, ingest, pipeline, nodes), for the
dashboard.

``up`` keeps its parts' state in ``up.json`` (cli/supervisor.py ``write_state``) and
hands its path to the parts it starts in ``STREAMIQ_UP_STATE`` (internal: set by up,
not a user setting). A node started that way shows each part's name, readiness,
restarts and whether it is crash-looping in its dashboard snapshot. The file is read at
most once per ``MAX_AGE_S`` however many dashboards are open; a node started otherwise,
or a file missing, too large or not the shape up writes, shows no parts (never an error).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ENV", "MAX_AGE_S", "UpState"]

ENV = "STREAMIQ_UP_STATE"
MAX_AGE_S = 1.0
MAX_BYTES = 1 << 20  # up.json is a few hundred bytes a part
#: what the dashboard shows of a part, and the type each must have
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "name": str, "ready": bool, "restarts": int, "crash_looping": bool,
    "last_exit": (str, type(None)), "restart_at": (int, float, type(None))}


class UpState:
    """The parts' state from ``path``, read again when older than ``MAX_AGE_S``."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.clock = path, clock
        self._doc: dict[str, Any] | None = None
        self._read_at: float | None = None

    @classmethod
    def from_env(cls) -> UpState | None:
        """The state of the ``up`` that started this process, if one did."""
        path = os.environ.get(ENV)
        return cls(Path(path)) if path else None

    def read(self) -> dict[str, Any] | None:
        """``{"updated": ..., "parts": [...]}``, or None when there is nothing to show."""
        now = self.clock()
        if self._read_at is None or now - self._read_at >= MAX_AGE_S:
            self._doc, self._read_at = _load(self.path), now
        return self._doc


def _load(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
        doc = json.loads(raw) if len(raw) <= MAX_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    parts = doc.get("parts") if isinstance(doc, dict) else None
    if not isinstance(parts, list) or not all(map(_valid, parts)):
        return None
    updated = doc.get("updated")  # type: ignore[union-attr]
    return {"updated": updated if isinstance(updated, int | float) else None,
            "parts": [{k: p[k] for k in _FIELDS if k in p} for p in parts]}


def _valid(part: Any) -> bool:
    return isinstance(part, dict) and all(
        isinstance(part[k], t) for k, t in _FIELDS.items() if k in part) and \
        all(k in part for k in ("name", "ready", "restarts", "crash_looping"))
