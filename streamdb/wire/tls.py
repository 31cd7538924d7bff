"""The server's TLS context, from a PEM certificate chain and private key."""

from __future__ import annotations

import ssl
from pathlib import Path

from streamdb.errors import ConfigurationError


def server_ssl_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """TLS 1.2 or newer with the library's default (secure) ciphers; no client certificates."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(
            f"cannot load TLS certificate {cert_file} with key {key_file}: {exc}") from None
    return context
