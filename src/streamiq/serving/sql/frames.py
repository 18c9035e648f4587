"""What a node and its SQL workers say to each other (``pool.py`` on the node, ``worker.py``
in the worker): frames of a 4-byte length and a pickle, over a Unix socket pair that only
the two ends hold.

The node asks ``("run", op, args)`` and may follow with ``("cancel",)``; the worker
answers each run with ``("ok", result)`` or ``("err", error)``. A worker's first frame
is ``("ready", rss)``, its resident bytes once its modules are loaded. Errors travel as
their status and problem document (``dump_error``: ``StreamiqError.render``, what an
HTTP client or a peer gets) and are raised again on the node as the error the document
names (``load_error``: ``errors.from_problem``, the same pair the peer protocol uses), so
no class is looked up by its module's name.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

from streamiq.errors import StreamiqError, from_problem

__all__ = ["ErrorDump", "dump_error", "frame", "load_error", "read_frame"]

_HEAD = struct.Struct("!I")
#: (http status, problem document) of a StreamiqError
ErrorDump = tuple[int, bytes]


def frame(obj: Any) -> bytes:
    """``obj`` as one frame."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEAD.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next frame's object (``IncompleteReadError``: the other end is gone)."""
    (size,) = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    return pickle.loads(await reader.readexactly(size))


def dump_error(exc: StreamiqError) -> ErrorDump:
    return exc.http_status, exc.render()


def load_error(dumped: ErrorDump) -> StreamiqError:
    """The error ``dump_error`` described (its code's class; an unknown code: by its
    status)."""
    return from_problem(*dumped)
