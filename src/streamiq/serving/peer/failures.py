"""A peer request's failure as its reply frame: the one place the owner maps an error
onto the peer protocol (a ``StreamiqError`` is its status and problem document,
``codec.reply``; anything else is logged with its trace and answered a bare 500)."""

from __future__ import annotations

import logging

from streamiq.errors import StreamiqError
from streamiq.serving.cluster.wire import reply_frame
from streamiq.serving.query import codec

__all__ = ["failure"]

log = logging.getLogger("streamiq.routing")


def failure(rid: int, exc: BaseException, what: str) -> bytes:
    """The reply frame of request ``rid`` that failed with ``exc`` while ``what``."""
    if isinstance(exc, StreamiqError):
        return reply_frame(rid, *codec.reply(exc))
    log.error("%s failed", what, exc_info=exc)
    return reply_frame(rid, *codec.reply(StreamiqError(f"{what} failed")))
