"""What ``streamiq up`` saves beside its state directory, and the token a client sends.

``up`` keeps its demo token, JWT and cluster secrets and ``up.json`` next to its state directory
(``STREAMIQ_STATE_DIR``, default ``.streamiq/state``, so ``.streamiq/token``). The CLI
and the Python client look for a token the same way, here, so that a person who ran
``streamiq up`` in this folder is let in by either without exporting anything, and an
error can say which token was refused.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["find_token", "saved_file"]


def saved_file(name: str) -> Path:
    """A file ``streamiq up`` keeps beside its state directory (STREAMIQ_STATE_DIR,
    default .streamiq/state): ``token``, ``jwt-secret``, ``cluster-secret``, ``up.json``."""
    return Path(os.environ.get("STREAMIQ_STATE_DIR") or ".streamiq/state").parent / name


def find_token(given: str | None = None) -> tuple[str | None, str]:
    """The bearer token to send and where it came from: ``given``, else the
    ``STREAMIQ_TOKEN`` environment variable, else the demo token ``up`` saved
    (``.streamiq/token``); ``(None, "")`` when there is none. Where it came from is
    said as a noun phrase ("the token in STREAMIQ_TOKEN") for an error message."""
    if given:
        return given, "the token given"
    if env := os.environ.get("STREAMIQ_TOKEN"):
        return env, "the token in STREAMIQ_TOKEN"
    path = saved_file("token")
    try:
        saved = path.read_text().strip()
    except OSError:
        return None, ""
    return (saved, f"the token saved in {path}") if saved else (None, "")
