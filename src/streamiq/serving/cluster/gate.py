"""The authentication gate of a node's routes: client tokens and the cluster credential.

Every route but the open ones (``/health``, ``/metrics``, the dashboard's page) runs
``Gate.check`` first: a request marked forwarded must carry the cluster credential
(``streamiq.auth.hop_mark``; refused before it takes a peer slot), and the client's
token must allow the view the route reads (``routes.view_of``: the path's ``view``, or
an alias's view). The lean path and the lookup wire check the same token and mark.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from streamiq.auth import Authenticator, hop_mark
from streamiq.config import Settings
from streamiq.errors import Unauthenticated
from streamiq.serving.cluster.peers import FORWARDED
from streamiq.serving.routes import view_of

__all__ = ["Gate"]


class Gate:
    def __init__(self, settings: Settings) -> None:
        # client tokens, and the credential forwarded requests carry (streamiq/auth.py)
        self.auth = Authenticator.from_settings(settings)
        secret = settings.cluster_secret
        self.mark = hop_mark(secret.get_secret_value() if secret else None)
        self.mark_bytes = self.mark.encode()

    def is_mark(self, got: bytes) -> bool:
        return hmac.compare_digest(got, self.mark_bytes)

    def is_forwarded(self, request: Request) -> bool:
        """A request from a peer: it carries the cluster credential."""
        got = request.headers.get(FORWARDED)
        return got is not None and self.is_mark(got.encode("latin-1"))

    def check(self, request: Request) -> None:
        """Authenticate a request; raises ``Unauthenticated`` or ``Forbidden``."""
        if FORWARDED in request.headers and not self.is_forwarded(request):
            raise Unauthenticated("a request marked forwarded without the cluster "
                                  "credential")
        authorization = request.headers.get("authorization")
        route = request.scope.get("route")
        view = view_of(getattr(route, "path", None), request.path_params)
        if view is None:
            self.auth.principal(authorization)
        else:
            self.auth.reader(authorization, view)
