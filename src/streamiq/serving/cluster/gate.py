"""The authentication gate: client tokens and the cluster credential, for every front end.

A request from a peer must come with the cluster credential (``streamiq.auth.hop_mark``:
the peer protocol's connection preface, or an HTTP request's forwarded mark; refused
before it takes a peer slot), and the client's token must allow the view the request
reads. The HTTP routes (``serving/http/guard.py``), the lean path and the peer server
(``serving/peer/server.py``) check the same token and mark here. No web framework: a
front end hands over the header values it read.
"""

from __future__ import annotations

import hmac

from streamiq.auth import Authenticator, hop_mark
from streamiq.config import Settings
from streamiq.errors import Unauthenticated

__all__ = ["FORWARDED", "Gate"]

#: the HTTP header that marks a request as a peer's (its value: the cluster credential)
FORWARDED = "x-streamiq-forwarded"


class Gate:
    def __init__(self, settings: Settings) -> None:
        # client tokens, and the credential peers show each other (streamiq/auth.py)
        self.auth = Authenticator.from_settings(settings)
        secret = settings.cluster_secret
        self.mark = hop_mark(secret.get_secret_value() if secret else None)
        self.mark_bytes = self.mark.encode()

    def is_mark(self, got: bytes) -> bool:
        return hmac.compare_digest(got, self.mark_bytes)

    def check(self, authorization: str | None, mark: str | None, view: str | None) -> bool:
        """Authenticate a request: its Authorization, the forwarded mark it carries (None:
        none) and the view it reads (None: no view). True when it is a peer's request;
        raises ``Unauthenticated`` or ``Forbidden``."""
        forwarded = mark is not None and self.is_mark(mark.encode("latin-1"))
        if mark is not None and not forwarded:
            raise Unauthenticated("a request marked forwarded without the cluster "
                                  "credential")
        if view is None:
            self.auth.principal(authorization)
        else:
            self.auth.reader(authorization, view)
        return forwarded
