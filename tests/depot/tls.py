"""A throwaway certificate authority for depot tests over TLS."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme


def certificate(tmp_path: Path) -> tuple[Path, Path, ssl.SSLContext]:
    """A certificate for 127.0.0.1 and its key, written under ``tmp_path`` for a depot's ``certfile`` and
    ``keyfile``, and a client context that trusts it."""
    authority = trustme.CA()
    cert = authority.issue_cert("127.0.0.1")
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    trusted = ssl.create_default_context()
    authority.configure_trust(trusted)
    return certfile, keyfile, trusted
