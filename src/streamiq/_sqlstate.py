"""PostgreSQL wire plumbing beside ``_http``: the one mapping of a streamiq error to the
fields of an ``ErrorResponse`` (SQLSTATE, severity, message, detail).

Every error the SQL front end meets is a ``StreamiqError`` by the time it is answered
(the DuckDB step converts its exceptions at its edge, ``serving/sql/duck.py``), so the
class decides the SQLSTATE exactly as it decides the HTTP status in ``_http``.
"""

from __future__ import annotations

from streamiq.errors import (
    BadRequest,
    BadSql,
    Canceled,
    DeadlineExceeded,
    Forbidden,
    NoCursor,
    NotActive,
    NotFound,
    NotUpToBound,
    Overloaded,
    PayloadTooLarge,
    PeerError,
    RequestTimeout,
    StreamiqError,
    TooComplex,
    TooManyRows,
    TooManySubscriptions,
    Unauthenticated,
    Unavailable,
    UnknownView,
)

__all__ = ["SQLSTATE", "error_fields", "sqlstate_of"]

#: the nearest class in an error's MRO decides (PostgreSQL's errcodes appendix)
SQLSTATE: dict[type[StreamiqError], str] = {
    StreamiqError: "XX000",  # internal_error
    BadRequest: "22023",  # invalid_parameter_value
    BadSql: "42601",  # syntax_error
    TooComplex: "54001",  # statement_too_complex
    NoCursor: "34000",  # invalid_cursor_name
    TooManyRows: "54000",  # program_limit_exceeded
    PayloadTooLarge: "54000",  # a statement past --sql-max-statement-bytes
    Unauthenticated: "28P01",  # invalid_password
    Forbidden: "42501",  # insufficient_privilege
    NotFound: "42704",  # undefined_object
    UnknownView: "42P01",  # undefined_table
    Canceled: "57014",  # query_canceled
    DeadlineExceeded: "57014",  # query_canceled (PostgreSQL's statement_timeout)
    NotActive: "57P03",  # cannot_connect_now
    Unavailable: "57P03",
    Overloaded: "53300",  # too_many_connections
    TooManySubscriptions: "53300",
    RequestTimeout: "57P05",  # idle_session_timeout
    NotUpToBound: "55000",  # object_not_in_prerequisite_state
    PeerError: "08006",  # connection_failure
}


def sqlstate_of(exc: StreamiqError) -> str:
    for cls in type(exc).__mro__:
        state = SQLSTATE.get(cls)
        if state is not None:
            return state
    return "XX000"


def error_fields(exc: StreamiqError, *, fatal: bool = False) -> dict[str, str]:
    """The fields of the ``ErrorResponse`` answering ``exc`` (``fatal``: the server
    closes the connection after it, as for a bad password)."""
    severity = "FATAL" if fatal else "ERROR"
    fields = {"S": severity, "V": severity, "C": sqlstate_of(exc), "M": exc.message}
    if exc.extra:
        fields["D"] = ", ".join(f"{k}={v}" for k, v in sorted(exc.extra.items()))
    return fields
