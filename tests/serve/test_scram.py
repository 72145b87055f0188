"""SCRAM-SHA-256, the server's side, against independent vectors: RFC 7677's example exchange, RFC 4013's
SASLprep examples, and PostgreSQL's rule for passwords SASLprep refuses (used as they are, as libpq does)."""

from __future__ import annotations

import base64

import pytest

from replwire.codec.serve.errors import AuthenticationFailed
from replwire.codec.serve.scram import ScramExchange, ScramSecret, password_bytes, saslprep

# RFC 7677, section 3: user "user", password "pencil"
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def exchange(password: str = "pencil") -> ScramExchange:
    secret = ScramSecret.from_password(password, salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), iterations=4096)
    return ScramExchange(secret, nonce=SERVER_NONCE)


def test_the_rfc_7677_exchange():
    scram = exchange()
    assert scram.first(CLIENT_FIRST) == SERVER_FIRST
    assert scram.final(CLIENT_FINAL) == SERVER_FINAL


def test_a_wrong_password_is_refused():
    scram = exchange("pencil2")
    scram.first(CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match="password does not match"):
        scram.final(CLIENT_FINAL)


@pytest.mark.parametrize("final, error", [
    # another nonce than the server's first message gave
    (CLIENT_FINAL.replace(b"hNlF$k0,", b"hNlF$k1,"), "nonce does not match"),
    # one bit of the proof changed
    (CLIENT_FINAL.replace(b"p=dHzb", b"p=eHzb"), "password does not match"),
    # not base64, and base64 of the wrong length
    (CLIENT_FINAL.replace(b"p=dHzb", b"p=*Hzb"), "malformed SCRAM proof"),
    (CLIENT_FINAL[:-4], "malformed SCRAM proof"),
    # a channel-binding attribute other than the GS2 header's ("n,," is "biws")
    (CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), "channel-binding attribute"),
    (CLIENT_FINAL.replace(b"c=biws,", b""), "channel-binding attribute"),
    (b"garbage", "malformed SCRAM message"),
], ids=["nonce", "proof", "proof-not-base64", "proof-short", "binding-y", "binding-missing", "garbage"])
def test_a_bad_client_final_message_is_refused(final, error):
    scram = exchange()
    scram.first(CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match=error):
        scram.final(final)


def test_channel_binding_flags():
    """``n`` (client does not support it) and ``y`` (client supports it, thinks the server does not) are
    taken; ``p`` (binding required) is refused, as the server offers no binding without TLS."""
    yes = exchange()
    assert yes.first(b"y" + CLIENT_FIRST[1:]) == SERVER_FIRST
    with pytest.raises(AuthenticationFailed, match="channel-binding attribute"):
        yes.final(CLIENT_FINAL)  # (its c= says "n,,": not the "y,," it began with)
    with pytest.raises(AuthenticationFailed, match="channel binding is not supported"):
        exchange().first(b"p=tls-server-end-point,,n=user,r=abc")
    with pytest.raises(AuthenticationFailed, match="channel-binding flag"):
        exchange().first(b"x,,n=user,r=abc")
    with pytest.raises(AuthenticationFailed, match="authorization identity"):
        exchange().first(b"n,a=admin,n=user,r=abc")
    with pytest.raises(AuthenticationFailed, match="no client nonce"):
        exchange().first(b"n,,n=user")


@pytest.mark.parametrize("text, prepared", [
    ("I\u00adX", "IX"),  # RFC 4013 section 3: SOFT HYPHEN mapped to nothing
    ("user", "user"),  # no transformation
    ("USER", "USER"),  # case preserved
    ("\u00aa", "a"),  # output is NFKC, input in ISO 8859-1
    ("\u2168", "IX"),  # output is NFKC, will match 1st example
    ("a\u00a0b", "a b"),  # a non-ASCII space mapped to a space (table C.1.2)
])
def test_saslprep_rfc_4013_examples(text, prepared):
    assert saslprep(text) == prepared


@pytest.mark.parametrize("text", [
    "\u0007",  # RFC 4013 section 3: error, prohibited character
    "\u0627\u0031",  # error, bidirectional check
    "\u00ad",  # nothing left after mapping
    "a\u0221",  # unassigned in Unicode 3.2 (table A.1)
])
def test_saslprep_refuses(text):
    with pytest.raises(ValueError, match="SASLprep"):
        saslprep(text)


def test_a_password_saslprep_refuses_is_used_as_it_is():
    """PostgreSQL's and libpq's rule: an ASCII password as it is (control characters too); a password that
    is not UTF-8 or that SASLprep refuses, as it is; any other, SASLprep'd."""
    assert password_bytes("\u0007pw") == b"\x07pw"
    assert password_bytes("\u0627\u0031") == "\u0627\u0031".encode()
    assert password_bytes("x\udcff") == b"x\xff"  # (an undecodable byte of a command line, kept as a surrogate)
    assert password_bytes("\u2168") == b"IX"
