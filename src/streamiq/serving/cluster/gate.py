"""The authentication gate: client tokens and the cluster credential, for every front end.

A peer shows the cluster credential (``streamiq.auth.hop_mark``) as the first line of a
peer-protocol connection, before it takes a peer slot (``serving/peer/server.py``); peers
never ask over HTTP. The client's token must allow the view a request reads: the HTTP
routes (``Answers.check``), the lean path and the peer server (the client's
Authorization travels with every peer request) check the same token here. No web
framework: a front end hands over the header values it read.
"""

from __future__ import annotations

import hmac

from streamiq.auth import Authenticator, hop_mark
from streamiq.config import Settings

__all__ = ["Gate"]


class Gate:
    def __init__(self, settings: Settings) -> None:
        # client tokens, and the credential peers show each other (streamiq/auth.py)
        self.auth = Authenticator.from_settings(settings)
        secret = settings.cluster_secret
        self.mark = hop_mark(secret.get_secret_value() if secret else None)
        self.mark_bytes = self.mark.encode()

    def is_mark(self, got: bytes) -> bool:
        """Whether ``got`` is the cluster credential (compared in constant time)."""
        return hmac.compare_digest(got, self.mark_bytes)

    def check(self, authorization: str | None, view: str | None) -> None:
        """Authenticate a client's request: its Authorization and the view it reads (None:
        no view); raises ``Unauthenticated`` or ``Forbidden``."""
        if view is None:
            self.auth.principal(authorization)
        else:
            self.auth.reader(authorization, view)
