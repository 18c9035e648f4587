"""TLS for the HTTP API and node-to-node traffic, from certificate files.

A node (or the ingest service) given ``--tls-cert-file`` and ``--tls-key-file`` serves
HTTPS only, and calls its peers over TLS as well (every request of the peer protocol),
verified against ``--tls-ca-file`` (default: the system's CAs). Every
node of a cluster runs with TLS or none does: a peer's advertised ``host:port`` is
reached with the same scheme, and the certificate must name that host.
"""

from __future__ import annotations

import ssl

from streamiq.config import Settings

__all__ = ["client_context", "scheme", "server_context"]


def scheme(s: Settings) -> str:
    return "https" if s.tls_cert_file is not None else "http"


def client_context(s: Settings) -> ssl.SSLContext | None:
    """The context a node verifies its peers with (None: plain TCP)."""
    if s.tls_cert_file is None:
        return None
    ctx = ssl.create_default_context(
        cafile=str(s.tls_ca_file) if s.tls_ca_file is not None else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def server_context(s: Settings) -> ssl.SSLContext | None:
    """The certificate a node (HTTP and SQL) or the ingest serves with (None: plain TCP)."""
    if s.tls_cert_file is None or s.tls_key_file is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(s.tls_cert_file), str(s.tls_key_file))
    return ctx
