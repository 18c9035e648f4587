"""What a node and its SQL workers say to each other (``pool.py`` on the node, ``worker.py``
in the worker): frames of a 4-byte length and a pickle, over a Unix socket pair that only
the two ends hold.

The node asks ``("run", op, args)`` and may follow with ``("cancel",)``; the worker
answers each run with ``("ok", result)`` or ``("err", error)``. A worker's first frame
is ``("ready", rss)``, its resident bytes once its modules are loaded. Errors travel as
their class's module and name, message and extra fields (``dump_error``) and are raised
again on the node as the same ``StreamiqError`` class (``load_error``).
"""

from __future__ import annotations

import asyncio
import importlib
import pickle
import struct
from typing import Any

from streamiq.errors import StreamiqError

__all__ = ["ErrorDump", "dump_error", "frame", "load_error", "read_frame"]

_HEAD = struct.Struct("!I")
#: (module, class name, message, extra, http status) of a StreamiqError
ErrorDump = tuple[str, str, str, dict[str, Any], int]


def frame(obj: Any) -> bytes:
    """``obj`` as one frame."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEAD.pack(len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> Any:
    """The next frame's object (``IncompleteReadError``: the other end is gone)."""
    (size,) = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    return pickle.loads(await reader.readexactly(size))


def dump_error(exc: StreamiqError) -> ErrorDump:
    cls = type(exc)
    return (cls.__module__, cls.__qualname__, exc.message, dict(exc.extra), exc.http_status)


def load_error(dumped: ErrorDump) -> StreamiqError:
    """The error ``dump_error`` described (a class that cannot be found: StreamiqError)."""
    module, name, message, extra, status = dumped
    try:
        cls = getattr(importlib.import_module(module), name, StreamiqError)
    except ImportError:
        cls = StreamiqError
    if not (isinstance(cls, type) and issubclass(cls, StreamiqError)):
        cls = StreamiqError
    err = cls.__new__(cls)  # StreamiqError's own __init__: a subclass's may take others
    StreamiqError.__init__(err, message, **extra)
    err.http_status = status
    return err
