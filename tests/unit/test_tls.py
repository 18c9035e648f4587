from __future__ import annotations

import ssl
from pathlib import Path

import trustme

from streamiq.config import Settings
from streamiq.tls import client_context, scheme


def test_plaintext_without_a_certificate() -> None:
    s = Settings(auth=False)
    assert scheme(s) == "http" and client_context(s) is None


def test_a_certificate_turns_https_on_and_peers_are_verified(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "c.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "k.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    s = Settings(auth=False, tls_cert_file=tmp_path / "c.pem", tls_key_file=tmp_path / "k.pem",
                 tls_ca_file=tmp_path / "ca.pem")
    ctx = client_context(s)
    assert scheme(s) == "https" and ctx is not None
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert len(ctx.get_ca_certs()) == 1  # the given CA, not the system's
