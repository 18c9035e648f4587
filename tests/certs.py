"""A test CA (trustme) and a certificate for 127.0.0.1/localhost, written as the PEM
files a node's --tls-cert-file, --tls-key-file and --tls-ca-file take."""

from __future__ import annotations

from pathlib import Path

import trustme

__all__ = ["tls_files"]


def tls_files(root: Path) -> dict[str, Path]:
    """{"ca", "cert", "key"}: the CA, the certificate chain and its key, under ``root``."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    files = {"ca": root / "ca.pem", "cert": root / "node.pem", "key": root / "key.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    for blob in cert.cert_chain_pems[1:]:
        blob.write_to_path(str(files["cert"]), append=True)
    return files
