"""SCRAM-SHA-256 password authentication, the server's side (RFC 5802 and RFC 7677, as PostgreSQL runs it).

Strategy: the password is turned into PostgreSQL's stored form once (a random salt, 4096 iterations of
PBKDF2, the stored and server keys), so a connection never handles the password itself.
:class:`ScramExchange` is one exchange, sans I/O: the client's first message in, the server's first
message out; the client's final message in, the server's final message out -- or
:class:`AuthenticationFailed`.  Over TLS the exchange may be SCRAM-SHA-256-PLUS, bound to the server's
certificate (``tls-server-end-point``, RFC 5929, as PostgreSQL binds): the client says ``p``, and ``y`` is then
refused (a client that can bind and thinks the server cannot was shown a tampered offer); without TLS a
client may say ``n`` or ``y`` but not ``p``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import stringprep
import unicodedata
from dataclasses import dataclass

from .errors import AuthenticationFailed

__all__ = ["MECHANISM", "MECHANISM_PLUS", "ScramExchange", "ScramSecret",
           "certificate_binding", "password_bytes", "saslprep"]

MECHANISM = "SCRAM-SHA-256"
#: The mechanism with channel binding (``tls-server-end-point``, RFC 5929), offered over TLS.
MECHANISM_PLUS = "SCRAM-SHA-256-PLUS"
BINDING_TYPE = "tls-server-end-point"
ITERATIONS = 4096


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


_PROHIBITED = (stringprep.in_table_c12, stringprep.in_table_c21_c22, stringprep.in_table_c3,
               stringprep.in_table_c4, stringprep.in_table_c5, stringprep.in_table_c6, stringprep.in_table_c7,
               stringprep.in_table_c8, stringprep.in_table_c9, stringprep.in_table_a1)


def saslprep(text: str) -> str:
    """``text`` prepared by SASLprep (RFC 4013, the "SASLprep" profile of stringprep, RFC 3454), as
    PostgreSQL and libpq run it: non-ASCII spaces mapped to a space, characters "commonly mapped to
    nothing" removed, then refused (``ValueError``) if that leaves nothing, if it holds a prohibited or
    unassigned code point, or if it fails the bidirectional check -- PostgreSQL checks the mapped string,
    before normalizing -- and normalized to NFKC."""
    mapped = "".join(" " if stringprep.in_table_c12(c) else c for c in text if not stringprep.in_table_b1(c))
    if not mapped:
        raise ValueError("SASLprep: empty after mapping")
    for c in mapped:
        if any(table(c) for table in _PROHIBITED):
            raise ValueError(f"SASLprep: prohibited code point U+{ord(c):04X}")
    if any(stringprep.in_table_d1(c) for c in mapped):
        if any(stringprep.in_table_d2(c) for c in mapped):
            raise ValueError("SASLprep: both right-to-left and left-to-right characters")
        if not (stringprep.in_table_d1(mapped[0]) and stringprep.in_table_d1(mapped[-1])):
            raise ValueError("SASLprep: a right-to-left string must begin and end with a right-to-left character")
    return unicodedata.normalize("NFKC", mapped)


def password_bytes(password: str) -> bytes:
    """The bytes SCRAM salts for ``password``, by PostgreSQL's rule (and libpq's, so the two agree): an ASCII
    password as it is; otherwise its SASLprep form -- or, if it is not valid UTF-8 (a command line's
    undecodable bytes, kept as surrogates) or SASLprep refuses it, the password as it is."""
    raw = password.encode("utf-8", "surrogateescape")
    if password.isascii():
        return raw
    try:
        raw.decode("utf-8")
        return saslprep(password).encode("utf-8")
    except ValueError:  # (UnicodeDecodeError is one)
        return raw


@dataclass(frozen=True)
class ScramSecret:
    """What a server keeps of a password: salt, iteration count, stored key and server key."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_password(cls, password: str, *, salt: bytes | None = None, iterations: int = ITERATIONS) -> ScramSecret:
        salt = salt if salt is not None else secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac("sha256", password_bytes(password), salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        return cls(salt, iterations, hashlib.sha256(client_key).digest(), _hmac(salted, b"Server Key"))


def _attributes(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed(f"malformed SCRAM message: attribute {part[:20]!r}")
        out.append((part[0], part[2:]))
    return out


class ScramExchange:
    """One SCRAM-SHA-256 exchange against ``secret``.  ``binding``: over TLS, the channel-binding data the
    server offers (:func:`certificate_binding` of its certificate; then SCRAM-SHA-256-PLUS is offered too);
    ``mechanism``: the one the client chose."""

    def __init__(self, secret: ScramSecret, *, nonce: str | None = None, binding: bytes | None = None,
                 mechanism: str = MECHANISM) -> None:
        self.secret = secret
        self.binding, self.mechanism = binding, mechanism
        self._server_nonce = nonce if nonce is not None else base64.b64encode(secrets.token_bytes(18)).decode()
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""

    def first(self, client_first: bytes) -> bytes:
        """The client-first-message (from SASLInitialResponse) in, the server-first-message out."""
        try:
            text = client_first.decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed SCRAM message: not ASCII") from None
        flag, _, rest = text.partition(",")
        plus = self.mechanism == MECHANISM_PLUS
        if flag.startswith("p="):
            if self.binding is None:
                raise AuthenticationFailed("channel binding is not supported by this server")
            if flag != f"p={BINDING_TYPE}":
                raise AuthenticationFailed(f"unsupported SCRAM channel-binding type {flag[2:]!r}")
            if not plus:
                raise AuthenticationFailed("channel binding asked for with SCRAM-SHA-256: use SCRAM-SHA-256-PLUS")
        elif flag not in ("n", "y"):
            raise AuthenticationFailed("malformed SCRAM message: unexpected channel-binding flag")
        elif plus:
            raise AuthenticationFailed("SCRAM-SHA-256-PLUS chosen without channel binding")
        elif flag == "y" and self.binding is not None:
            # (the client can bind, and thinks this server cannot: someone removed the -PLUS offer)
            raise AuthenticationFailed("SCRAM channel binding negotiation error: the client supports channel "
                                       "binding but thinks the server does not; this server does")
        authzid, _, bare = rest.partition(",")
        if authzid:
            raise AuthenticationFailed("client uses authorization identity, which is not supported")
        self._gs2 = f"{flag},{authzid},"
        attributes = dict(_attributes(bare))
        if "r" not in attributes or not attributes["r"]:
            raise AuthenticationFailed("malformed SCRAM message: no client nonce")
        self._client_first_bare = bare
        self._nonce = attributes["r"] + self._server_nonce
        salt = base64.b64encode(self.secret.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self.secret.iterations}"
        return self._server_first.encode("ascii")

    def final(self, client_final: bytes) -> bytes:
        """The client-final-message in, the server-final-message out; :class:`AuthenticationFailed` if the
        proof is wrong."""
        if not self._server_first:
            raise AuthenticationFailed("SCRAM final message before the first")
        try:
            text = client_final.decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("malformed SCRAM message: not ASCII") from None
        without_proof, separator, proof_part = text.rpartition(",p=")
        if not separator:
            raise AuthenticationFailed("malformed SCRAM message: no proof")
        attributes = dict(_attributes(without_proof)) if without_proof else {}
        bound = self._gs2.encode() + ((self.binding or b"") if self._gs2.startswith("p=") else b"")
        if attributes.get("c") != base64.b64encode(bound).decode():
            raise AuthenticationFailed("unexpected SCRAM channel-binding attribute in client-final-message")
        if attributes.get("r") != self._nonce:
            raise AuthenticationFailed("SCRAM nonce does not match")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise AuthenticationFailed("malformed SCRAM proof") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("ascii")
        signature = _hmac(self.secret.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed("malformed SCRAM proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.secret.stored_key):
            raise AuthenticationFailed("password does not match")
        verifier = base64.b64encode(_hmac(self.secret.server_key, auth_message)).decode()
        return f"v={verifier}".encode("ascii")


#: Signature algorithm OIDs (DER content bytes) -> the hash tls-server-end-point uses (RFC 5929, section 4.1:
#: the certificate's signature hash, SHA-256 for MD5 and SHA-1).
_SIGNATURE_HASHES = {
    bytes.fromhex("2a864886f70d010104"): "sha256",  # md5WithRSAEncryption
    bytes.fromhex("2a864886f70d010105"): "sha256",  # sha1WithRSAEncryption
    bytes.fromhex("2a864886f70d01010e"): "sha224",
    bytes.fromhex("2a864886f70d01010b"): "sha256",
    bytes.fromhex("2a864886f70d01010c"): "sha384",
    bytes.fromhex("2a864886f70d01010d"): "sha512",
    bytes.fromhex("2a8648ce3d040301"): "sha224",  # ecdsa-with-SHA224
    bytes.fromhex("2a8648ce3d040302"): "sha256",
    bytes.fromhex("2a8648ce3d040303"): "sha384",
    bytes.fromhex("2a8648ce3d040304"): "sha512",
    bytes.fromhex("2a8648ce3d0401"): "sha256",  # ecdsa-with-SHA1
}


def _der(data: bytes, offset: int, end: int) -> tuple[int, int, int]:
    """The DER element at ``offset`` (before ``end``): its tag, where its content starts and ends."""
    if offset + 2 > end:
        raise ValueError("truncated DER")
    tag, length = data[offset], data[offset + 1]
    offset += 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4 or offset + count > end:
            raise ValueError("bad DER length")
        length = int.from_bytes(data[offset:offset + count], "big")
        offset += count
    if offset + length > end:
        raise ValueError("DER element past its end")
    return tag, offset, offset + length


def certificate_binding(der: bytes) -> bytes:
    """The ``tls-server-end-point`` channel-binding data of a DER certificate: its hash by its signature
    algorithm's hash (SHA-256 for MD5 and SHA-1); ``ValueError`` for a certificate signed otherwise (RSA-PSS,
    Ed25519: PostgreSQL cannot bind to those either)."""
    tag, start, end = _der(der, 0, len(der))  # Certificate ::= SEQUENCE {
    if tag != 0x30:
        raise ValueError("not a certificate")
    _, _, after_tbs = _der(der, start, end)  # tbsCertificate,
    tag, start, algorithm_end = _der(der, after_tbs, end)  # signatureAlgorithm AlgorithmIdentifier ::= SEQUENCE {
    tag_oid, oid_start, oid_end = _der(der, start, algorithm_end)  # algorithm OBJECT IDENTIFIER, ...
    if tag != 0x30 or tag_oid != 0x06:
        raise ValueError("not a certificate")
    name = _SIGNATURE_HASHES.get(der[oid_start:oid_end])
    if name is None:
        raise ValueError(f"no channel binding for the signature algorithm {der[oid_start:oid_end].hex()}")
    return hashlib.new(name, der).digest()
