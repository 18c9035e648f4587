"""A SQL worker's error reaches the node as the same error (``sql/frames.py``): its status
and problem document, read back by the code it names, as a peer's error reply is; so a
client gets the same SQLSTATE, message and fields from a worker's error as from the
node's own."""

from __future__ import annotations

from typing import Any

from streamiq import errors
from streamiq._sqlstate import sqlstate_of
from streamiq.serving.sql.frames import dump_error, frame, load_error


def _every(cls: type[errors.StreamiqError]) -> list[type[errors.StreamiqError]]:
    return [cls] + [c for sub in cls.__subclasses__() for c in _every(sub)]


def test_every_error_class_comes_back_as_itself() -> None:
    seen = 0
    for cls in _every(errors.StreamiqError):
        if (cls.code == errors.PeerError.code and cls is not errors.PeerError) \
                or cls.__module__ != "streamiq.errors":
            continue  # the peer errors share a code, _http.ApiError has its own per error
        exc = cls.__new__(cls)
        errors.StreamiqError.__init__(exc, f"{cls.__name__} happened", limit=5, view="v")
        back = load_error(dump_error(exc))
        assert type(back) is cls, cls
        assert (back.message, back.extra, back.http_status) == (
            exc.message, {"limit": 5, "view": "v"}, exc.http_status), cls
        assert sqlstate_of(back) == sqlstate_of(exc), cls
        seen += 1
    assert seen > 20


def test_the_dump_is_plain_data() -> None:
    """Nothing in an error's frame names a module or a class to import."""
    dumped: Any = dump_error(errors.TooManyRows("too many", limit=3))
    assert dumped[0] == errors.TooManyRows.http_status
    assert isinstance(dumped[1], bytes) and b"streamiq.errors" not in frame(("err", dumped))
