"""Password verifiers and secret masking: pure functions shared by the catalog and the wire.

Passwords are never stored: a role keeps a SCRAM-SHA-256 verifier in PostgreSQL's text format
(RFC 5802 / RFC 7677), `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64), and,
only for old clients when enabled, PostgreSQL's `md5` + md5(password + user) hash.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

SCRAM_ITERATIONS = 4096
SCRAM_SALT_BYTES = 16
_VERIFIER = re.compile(r"^SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+):([A-Za-z0-9+/=]+)$")


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


def scram_keys(password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) for a password. The password should be SASLprep-normalized;
    like PostgreSQL we use it as is when it is plain ASCII, the usual case."""
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = _hmac(salted, b"Client Key")
    stored_key = hashlib.sha256(client_key).digest()
    server_key = _hmac(salted, b"Server Key")
    return stored_key, server_key


def make_verifier(password: str, *, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores in pg_authid.rolpassword."""
    salt = salt if salt is not None else secrets.token_bytes(SCRAM_SALT_BYTES)
    stored_key, server_key = scram_keys(password, salt, iterations)
    b64 = base64.b64encode
    return f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}${b64(stored_key).decode()}:{b64(server_key).decode()}"


def parse_verifier(text: str) -> tuple[int, bytes, bytes, bytes]:
    """(iterations, salt, stored_key, server_key) of a verifier; ValueError if it is not one."""
    match = _VERIFIER.match(text)
    if match is None:
        raise ValueError("not a SCRAM-SHA-256 verifier")
    iterations, salt, stored, server = match.groups()
    return int(iterations), base64.b64decode(salt), base64.b64decode(stored), base64.b64decode(server)


def md5_hash(password: str, user: str) -> str:
    """PostgreSQL's md5 password hash: 'md5' + hex md5(password || user)."""
    return "md5" + hashlib.md5((password + user).encode()).hexdigest()  # noqa: S324 - the protocol's choice


def scram_password_matches(password: str, verifier: str) -> bool:
    """Whether a cleartext password (HTTP basic auth to the console) is the one a SCRAM-SHA-256
    verifier was made from; False for a malformed verifier."""
    try:
        iterations, salt, stored_key, _server_key = parse_verifier(verifier)
    except ValueError:
        return False
    return hmac.compare_digest(scram_keys(password, salt, iterations)[0], stored_key)


def md5_password_matches(password: str, user: str, stored_hash: str) -> bool:
    return hmac.compare_digest(md5_hash(password, user), stored_hash)


# PASSWORD 'text' ('' escapes), E'text' (backslash escapes too), U&'text' and $tag$text$tag$:
# the text is replaced, the rest of the statement kept. An unterminated literal is masked to the end.
_PASSWORD_LITERAL = re.compile(
    r"(\bPASSWORD\s+)(?:[Ee]'(?:[^'\\]|\\.|'')*'?|(?:[Uu]&)?'(?:[^']|'')*'?|\$(\w*)\$.*?(?:\$\2\$|$))",
    re.IGNORECASE | re.DOTALL)


def redact_sql(text: str) -> str:
    """Statement text safe to log or show: every PASSWORD '...' literal masked."""
    if "password" not in text.lower():
        return text
    return _PASSWORD_LITERAL.sub(r"\1'********'", text)
