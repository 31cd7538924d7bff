"""The server side of a SCRAM-SHA-256 exchange (RFC 5802/7677), as PostgreSQL runs it.

Pure: the connection (server.py) moves the messages. No channel binding is offered, so the
client's gs2 header is `n,,` (no support) or `y,,` (supports it, believes the server does not).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from streamdb.auth import SCRAM_ITERATIONS, make_verifier, parse_verifier
from streamdb.errors import ProtocolViolation

MECHANISM = "SCRAM-SHA-256"
_NONCE_BYTES = 18
# Salt and keys for a failing exchange with an unknown role (or one without a password), so the
# exchange looks the same as for a real role and reveals nothing about which roles exist.
_MOCK_SECRET = secrets.token_bytes(32)


class ScramAuthenticationFailed(Exception):
    """The proof did not match the verifier (or there was no verifier)."""


def _mock_verifier(user: str) -> str:
    salt = hmac.new(_MOCK_SECRET, user.encode("utf-8"), hashlib.sha256).digest()[:16]
    return make_verifier(secrets.token_hex(16), iterations=SCRAM_ITERATIONS, salt=salt)


def _utf8(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolViolation("malformed SCRAM message: invalid UTF-8") from None


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ProtocolViolation(f"malformed SCRAM message ({what}): invalid attribute")
        pairs.append((part[0], part[2:]))
    return pairs


class ScramServer:
    """One exchange: client-first -> server-first, client-final -> server-final (or failure)."""

    def __init__(self, user: str, verifier: str | None, *, server_nonce: str | None = None) -> None:
        # server_nonce: fixed only by tests (RFC 7677's example); otherwise fresh random bytes.
        self._server_nonce = server_nonce or base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()
        self._succeeds_if_proof_matches = verifier is not None
        try:
            parsed = parse_verifier(verifier if verifier is not None else _mock_verifier(user))
        except ValueError:
            self._succeeds_if_proof_matches = False
            parsed = parse_verifier(_mock_verifier(user))
        self._iterations, self._salt, self._stored_key, self._server_key = parsed
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def server_first(self, client_first: bytes) -> bytes:
        text = _utf8(client_first)
        # gs2-header: channel-binding flag "," [authzid] ","
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2):
            raise ProtocolViolation("malformed SCRAM message: missing gs2 header")
        if flag.startswith("p="):
            raise ProtocolViolation("channel binding was requested, but the server did not offer SCRAM-SHA-256-PLUS")
        if flag not in ("n", "y"):
            raise ProtocolViolation(f'malformed SCRAM message: unexpected channel-binding flag "{flag}"')
        if authzid:
            raise ProtocolViolation("client uses authorization identity, but it is not supported")
        attributes = _attributes(bare, "client-first-message")
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise ProtocolViolation("malformed SCRAM message: expected username and nonce")
        client_nonce = attributes[1][1]
        if not client_nonce or any(not (0x21 <= ord(c) <= 0x7E) or c == "," for c in client_nonce):
            raise ProtocolViolation("malformed SCRAM message: invalid client nonce")
        # The user name in the SCRAM message is ignored, as in PostgreSQL: the startup packet's counts.
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._server_first = (f"r={self._nonce},s={base64.b64encode(self._salt).decode()},"
                              f"i={self._iterations}")
        return self._server_first.encode()

    def server_final(self, client_final: bytes) -> bytes:
        """The server-final message; raises ScramAuthenticationFailed on a wrong password."""
        text = _utf8(client_final)
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise ProtocolViolation("malformed SCRAM message: missing proof")
        attributes = dict(_attributes(without_proof, "client-final-message"))
        expected_binding = base64.b64encode(self._gs2_header.encode()).decode()
        if attributes.get("c") != expected_binding:
            raise ProtocolViolation("SCRAM channel binding check failed")
        if attributes.get("r") != self._nonce:
            raise ProtocolViolation("SCRAM nonce mismatch")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise ProtocolViolation("malformed SCRAM message: invalid proof") from None
        if len(proof) != len(self._stored_key):
            raise ProtocolViolation("malformed SCRAM message: malformed proof in client-final-message")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.new(self._stored_key, auth_message, hashlib.sha256).digest()
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        matches = hmac.compare_digest(hashlib.sha256(client_key).digest(), self._stored_key)
        if not (matches and self._succeeds_if_proof_matches):
            raise ScramAuthenticationFailed()
        server_signature = hmac.new(self._server_key, auth_message, hashlib.sha256).digest()
        return f"v={base64.b64encode(server_signature).decode()}".encode()


def md5_response_matches(md5_hash: str, salt: bytes, response: str) -> bool:
    """PostgreSQL md5: the client sends 'md5' + md5(md5(password + user) hex + salt) hex."""
    if not md5_hash.startswith("md5") or len(md5_hash) != 35:
        return False
    expected = "md5" + hashlib.md5(md5_hash[3:].encode("ascii") + salt).hexdigest()  # noqa: S324 - the protocol
    return hmac.compare_digest(expected.encode(), response.encode("utf-8", "replace"))
