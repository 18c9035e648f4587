"""Who may ask: client tokens, and the credential nodes show each other.

Clients send ``Authorization: Bearer <token>`` on every request except liveness and
readiness (``/health``), the dashboard's files and ``/metrics``. A token is either

* an HS256 JWT signed with the configured ``--jwt-secret`` (as seed 004's service
  issues them); its ``scope`` claim (space-separated, OAuth 2 style) says what it may
  do, ``exp`` is honoured when present; or
* a static API key from ``--api-keys`` (``{"key": "scope ..."}``).

Scopes: ``views:<name>`` reads one view, ``views:*`` every view, ``ingest`` writes
through the ingest service, ``cluster:read`` sees the cluster's metadata whole (every
view's partitions and lag, the members, a node's health and traffic) without reading
any row; ``views:*`` includes it. Otherwise a token sees the metadata of the views it
may read only (``Principal.may_see``; ``serving/http/visible.py``). A JWT without a
``scope`` claim reads every view (seed 004's tokens carry none) and writes nothing. No
valid token: 401 UNAUTHENTICATED; a view the token may not read: 403 FORBIDDEN.

Node to node, the peer protocol's connection preface carries the cluster credential,
an HMAC-SHA256 keyed by the cluster secret (``hop_mark``): a connection without it is
refused before it takes one of the slots kept for peers (nodes ask each other only
over the peer protocol; an HTTP request is always a client's). The client's token
still travels with every hop and the owner checks it again. The credential is a
bearer secret between the nodes: across a network you do not trust, run the
node-to-node traffic over TLS.

A verified token is cached (up to ``_CACHE`` of them, until it expires), so the lookup
hot path pays a dict lookup, not an HMAC, per request.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import jwt

from streamiq.config import Settings
from streamiq.errors import Forbidden, Unauthenticated

__all__ = ["ANYONE", "CLUSTER_READ", "Authenticator", "Principal", "hop_mark", "mint"]

_CACHE = 4096
_BEARER = "bearer "
_NO_SCOPE = "views:*"  # a JWT without a scope claim reads every view
CLUSTER_READ = "cluster:read"  # the cluster's metadata whole, no rows


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from, and what it may do."""

    subject: str
    scopes: frozenset[str]

    def may_read(self, view: str) -> bool:
        return "views:*" in self.scopes or f"views:{view}" in self.scopes

    def may_write(self) -> bool:
        return "ingest" in self.scopes

    def may_see_cluster(self) -> bool:
        """The cluster's metadata whole: ``cluster:read``, or ``views:*``."""
        return "views:*" in self.scopes or CLUSTER_READ in self.scopes

    def may_see(self, view: str) -> bool:
        """The metadata of ``view`` (partitions, lag, progress): a reader of it, or of
        the cluster."""
        return self.may_read(view) or CLUSTER_READ in self.scopes


ANYONE = Principal("anonymous", frozenset({"views:*", "ingest"}))  # authentication off


def hop_mark(cluster_secret: str | None) -> str:
    """The cluster credential nodes send each other; ``"1"`` without a secret (a
    development cluster with authentication off)."""
    if not cluster_secret:
        return "1"
    return hmac.new(cluster_secret.encode(), b"streamiq hop v1", hashlib.sha256).hexdigest()


def mint(secret: str, *, subject: str = "demo", scope: str = "views:* ingest",
         ttl_s: float | None = None, now: float | None = None) -> str:
    """An HS256 token for ``secret`` (``streamiq up`` prints one for the demo,
    ``streamiq token`` mints others), issued at ``now`` (default: the time)."""
    issued = time.time() if now is None else now
    claims: dict[str, object] = {"sub": subject, "scope": scope, "iat": int(issued)}
    if ttl_s is not None:
        claims["exp"] = int(issued + ttl_s)
    return jwt.encode(claims, secret, algorithm="HS256")


class Authenticator:
    """Checks client tokens. ``enabled=False`` lets every request through as ANYONE."""

    def __init__(self, *, enabled: bool, jwt_secret: str | None = None,
                 api_keys: Mapping[str, str] | None = None) -> None:
        self.enabled = enabled
        self._secret = jwt_secret
        self._keys = {k.encode(): Principal(f"api-key-{i}", frozenset(v.split()))
                      for i, (k, v) in enumerate(sorted((api_keys or {}).items()))}
        self._cache: dict[bytes, tuple[Principal, float]] = {}

    @classmethod
    def from_settings(cls, s: Settings) -> Authenticator:
        return cls(enabled=s.auth, api_keys=s.api_keys,
                   jwt_secret=s.jwt_secret.get_secret_value() if s.jwt_secret else None)

    def principal(self, authorization: bytes | str | None) -> Principal:
        """The caller of a request with this Authorization header; raises
        ``Unauthenticated`` when it names nobody."""
        if not self.enabled:
            return ANYONE
        raw = authorization.encode("latin-1") if isinstance(authorization, str) \
            else authorization
        if not raw:
            raise Unauthenticated("no credentials: send 'Authorization: Bearer <token>'")
        hit = self._cache.get(raw)
        if hit is not None and hit[1] > time.time():
            return hit[0]
        if raw[:7].lower() != _BEARER.encode():
            raise Unauthenticated("the Authorization header is not 'Bearer <token>'")
        found, until = self._verify(raw[7:].strip())
        if len(self._cache) >= _CACHE:
            self._cache.clear()
        self._cache[raw] = (found, until)
        return found

    def expires(self, authorization: bytes | str | None) -> float:
        """When the token of this Authorization stops being valid (``time.time()``;
        infinite for API keys, tokens without ``exp`` and without authentication)."""
        if not self.enabled:
            return math.inf
        self.principal(authorization)
        raw = authorization.encode("latin-1") if isinstance(authorization, str) \
            else authorization
        hit = self._cache.get(raw or b"")
        return math.inf if hit is None else hit[1]

    def reader(self, authorization: bytes | str | None, view: str) -> Principal:
        """``principal`` that may read ``view``; raises ``Forbidden`` otherwise."""
        who = self.principal(authorization)
        if not who.may_read(view):
            raise Forbidden(f"this token may not read view {view!r}", view=view)
        return who

    def writer(self, authorization: bytes | str | None) -> Principal:
        who = self.principal(authorization)
        if not who.may_write():
            raise Forbidden("this token may not write (it lacks the 'ingest' scope)")
        return who

    def allows(self, authorization: bytes | None, view: str) -> bool:
        """The lean path's check: True when the request may read ``view`` (any doubt:
        False, and the full app answers with the 401 or 403)."""
        if not self.enabled:
            return True
        if authorization is not None:
            hit = self._cache.get(authorization)
            if hit is not None and hit[1] > time.time():
                return hit[0].may_read(view)
        try:
            return self.reader(authorization, view) is not None
        except (Unauthenticated, Forbidden):
            return False

    def _verify(self, token: bytes) -> tuple[Principal, float]:
        for key, who in self._keys.items():
            if hmac.compare_digest(key, token):
                return who, math.inf
        if self._secret is None:
            raise Unauthenticated("unknown API key")
        try:
            claims = jwt.decode(token, self._secret, algorithms=["HS256"],
                                options={"require": []})
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("the token has expired") from None
        except jwt.InvalidTokenError:
            raise Unauthenticated("not a valid token for this cluster") from None
        scope = claims.get("scope", _NO_SCOPE)
        if not isinstance(scope, str):
            raise Unauthenticated("the token's scope claim is not a string")
        exp = claims.get("exp")
        until = float(exp) if isinstance(exp, int | float) else math.inf
        return Principal(str(claims.get("sub", "")), frozenset(scope.split())), until
