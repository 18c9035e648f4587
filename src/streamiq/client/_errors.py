"""A refused request as the client raises it: ``QueryError``, saying who refused, why,
and for a refused token (401, 403) which token was sent and how to get one, so that a
script that only prints the error tells its user the fix at once instead of waiting for
something that will not come. ``transient`` separates what may pass by asking again.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TRANSIENT", "QueryError"]

#: answers that may pass by asking again later (another node, a moment later): a node
#: that does not hold the partition, too many subscriptions, no replica or peer in time
TRANSIENT = frozenset({421, 429, 502, 503, 504})


class QueryError(Exception):
    """A 4xx/5xx answer: ``code`` is the problem document's machine-readable code (e.g.
    ``NOT_ACTIVE``), ``detail`` its message, ``body`` the whole document, ``node`` who
    answered. The message says what to do about a refused token (401, 403), so a
    script that prints it tells its user the fix, not only the status."""

    def __init__(self, http_status: int, body: Any, node: str | None = None,
                 token_from: str = "") -> None:
        self.http_status = http_status
        self.body = body
        self.node = node
        doc = body if isinstance(body, dict) else {}
        self.code: str = str(doc.get("code") or ("PARTIAL" if doc.get("status") == "PARTIAL"
                                                 else "ERROR"))
        self.detail: str = str(doc.get("detail", body))
        where = f" (from {node})" if node else ""
        fix = _fix(http_status, token_from)
        super().__init__(f"{http_status} {self.code}: {self.detail}{where}"
                         + (f"; {fix}" if fix else ""))

    @property
    def transient(self) -> bool:
        """Asking again later may succeed (421, 429, 502-504); a refusal such as 400,
        401, 403 or 404 will not pass by waiting."""
        return self.http_status in TRANSIENT


def _fix(http_status: int, token_from: str) -> str:
    """What to do about a refused token, naming which token was sent."""
    get = ("export STREAMIQ_TOKEN with the token `streamiq up` printed, or run from the "
           "folder of `streamiq up` (its .streamiq/token is read)")
    if http_status == 401:
        return (f"{token_from} was refused (expired, or another up's?): {get}" if token_from
                else f"no token was sent: {get}")
    if http_status == 403:
        return (f"{token_from or 'the token sent'} may not do this: the demo token "
                "`streamiq up` printed reads every view; `streamiq token --scope views:NAME` "
                "mints one for a view")
    return ""
