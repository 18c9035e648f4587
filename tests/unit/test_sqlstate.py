"""The error hierarchy mapped to PostgreSQL SQLSTATEs in one place (beside HTTP's)."""

from __future__ import annotations

import pytest

from streamiq._sqlstate import error_fields, sqlstate_of
from streamiq.errors import (
    BadRequest,
    BadSql,
    Canceled,
    Forbidden,
    NoCursor,
    NotUpToBound,
    Overloaded,
    StreamiqError,
    TooComplex,
    TooManyRows,
    Unauthenticated,
    Unavailable,
    UnknownView,
)


@pytest.mark.parametrize(("exc", "state"), [
    (BadSql("x"), "42601"), (UnknownView("x"), "42P01"), (Unauthenticated("x"), "28P01"),
    (Overloaded("x"), "53300"), (Canceled("x"), "57014"), (TooManyRows("x"), "54000"),
    (Forbidden("x"), "42501"), (NotUpToBound("x"), "55000"), (Unavailable("x"), "57P03"),
    (BadRequest("x"), "22023"), (StreamiqError("x"), "XX000"), (TooComplex("x"), "54001"),
    (NoCursor("x"), "34000")])
def test_each_error_has_its_sqlstate(exc: StreamiqError, state: str) -> None:
    assert sqlstate_of(exc) == state


def test_error_fields_carry_severity_message_and_detail() -> None:
    exc = Unavailable("partitions 1, 3 unavailable", partitions=[1, 3])
    assert error_fields(exc) == {"S": "ERROR", "V": "ERROR", "C": "57P03",
                                 "M": "partitions 1, 3 unavailable",
                                 "D": "partitions=[1, 3]"}
    assert error_fields(Unauthenticated("no"), fatal=True)["S"] == "FATAL"
