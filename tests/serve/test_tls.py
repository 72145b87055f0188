"""TLS: ``serve`` with a certificate and key answers an SSL request ``S`` and runs the handshake; libpq checks
it with ``sslmode=require`` and, against a test CA made here with the ``openssl`` command, ``verify-full``;
clients off loopback must use TLS unless the server is told otherwise."""

from __future__ import annotations

import select
import shutil
import socket
import ssl
import struct
import subprocess
import time

import psycopg2
import psycopg2.extras
import pytest

from replwire.codec.serve import ServeError, Server, ServeSettings, Session, Slots
from replwire.codec.serve.errors import AuthenticationFailed
from replwire.codec.serve.scram import ScramExchange, ScramSecret, certificate_binding
from tests.serve.test_limits import startup_packet, tiny_source

FACTORY = psycopg2.extras.LogicalReplicationConnection


def _openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(where, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign", cwd=where)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A test CA, a server certificate it signed (for localhost and 127.0.0.1), and another CA."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test CA")
    where = tmp_path_factory.mktemp("pki")
    _make_ca(where, "ca")
    _make_ca(where, "other-ca")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=localhost",
             "-keyout", "server.key", "-out", "server.csr", cwd=where)
    (where / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=where)
    return where


def settings(pki, **kw) -> ServeSettings:
    return ServeSettings(160000, tls_cert=str(pki / "server.pem"), tls_key=str(pki / "server.key"), **kw)


def identify(conninfo: str) -> tuple[bool, str]:
    """Whether libpq's connection is encrypted, and IDENTIFY_SYSTEM's dbname."""
    conn = psycopg2.connect(conninfo, connection_factory=FACTORY)
    try:
        cur = conn.cursor()
        cur.execute("IDENTIFY_SYSTEM")
        return conn.info.ssl_in_use, cur.fetchone()[3]
    finally:
        conn.close()


def test_libpq_require_and_verify_full(pki):
    with Server(tiny_source(), settings=settings(pki)) as server:
        address = server.address
        assert identify(address.conninfo() + " sslmode=require") == (True, "replwire")
        full = f" sslmode=verify-full sslrootcert={pki / 'ca.pem'}"
        assert identify(address.conninfo() + full) == (True, "replwire")
        named = address.conninfo().replace("host=127.0.0.1", "host=localhost")
        assert identify(named + full) == (True, "replwire")
        with pytest.raises(psycopg2.OperationalError, match="certificate verify failed"):
            identify(address.conninfo() + f" sslmode=verify-full sslrootcert={pki / 'other-ca.pem'}")
        # from loopback, a client without TLS is served too
        assert identify(address.conninfo() + " sslmode=disable") == (False, "replwire")


def test_a_password_over_tls(pki):
    with Server(tiny_source(), settings=settings(pki, password="s3cret")) as server:
        assert identify(server.address.conninfo(password="s3cret") + " sslmode=require") == (True, "replwire")
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            identify(server.address.conninfo(password="wrong") + " sslmode=require")


def _own_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one off loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.mark.parametrize("allow_plaintext", [False, True])
def test_off_loopback_a_client_must_use_tls_unless_told_otherwise(pki, allow_plaintext):
    address = _own_address()
    if address is None:
        pytest.skip("this machine has no address off loopback to connect from")
    with Server(tiny_source(), host=address, settings=settings(pki, password="pw",
                                                               allow_plaintext=allow_plaintext)) as server:
        conninfo = server.address.conninfo(password="pw")
        assert identify(conninfo + " sslmode=require") == (True, "replwire")
        if allow_plaintext:
            assert identify(conninfo + " sslmode=disable") == (False, "replwire")
        else:
            with pytest.raises(psycopg2.OperationalError, match="must use TLS"):
                identify(conninfo + " sslmode=disable")


def test_bytes_after_the_ssl_request_are_refused(pki):
    """Data sent with the SSL request, before the handshake, would pass as if it came encrypted
    (CVE-2021-23214): refused."""
    session = Session(tiny_source(), settings(pki), Slots(), pid=1, cancel_key=0)
    session.receive(struct.pack(">ii", 8, 80877103) + startup_packet(user="u", replication="database"), 0.0)
    assert session.closed and b"08P01" in session.output()
    assert not session.start_tls
    twice = Session(tiny_source(), settings(pki), Slots(), pid=1, cancel_key=0)
    twice.receive(struct.pack(">ii", 8, 80877103), 0.0)
    assert twice.output() == b"S" and twice.start_tls
    twice.tls_started()
    twice.receive(struct.pack(">ii", 8, 80877103), 0.0)  # (again, inside TLS)
    assert twice.closed and b"08P01" in twice.output()
    # without TLS: N, and the startup goes on in clear
    plain = Session(tiny_source(), ServeSettings(160000), Slots(), pid=1, cancel_key=0)
    plain.receive(struct.pack(">ii", 8, 80877103), 0.0)
    assert plain.output() == b"N" and not plain.closed


def test_a_certificate_without_its_key_is_refused(pki):
    with pytest.raises(ServeError, match="both a certificate and its private key"):
        Server(tiny_source(), settings=ServeSettings(160000, tls_cert=str(pki / "server.pem")))
    with pytest.raises(ServeError, match="cannot load"):
        Server(tiny_source(), settings=ServeSettings(160000, tls_cert=str(pki / "server.pem"),
                                                    tls_key=str(pki / "ca.key")))


def test_the_command_serves_tls(pki, tmp_path):
    from tests.cli.test_cli_serve import serving, write_capture

    write_capture(tmp_path / "tiny.rwcap")
    with serving([str(tmp_path / "tiny.rwcap"), "--tls-cert", str(pki / "server.pem"), "--tls-key",
                  str(pki / "server.key")]) as conninfo:
        assert identify(conninfo + f" sslmode=verify-full sslrootcert={pki / 'ca.pem'}") == (True, "replwire")


def test_scram_channel_binding_over_tls(pki):
    """Over TLS, SCRAM-SHA-256-PLUS is offered with tls-server-end-point binding: libpq with
    channel_binding=require (which refuses to authenticate without it) gets in, with the right password
    only."""
    with Server(tiny_source(), settings=settings(pki, password="s3cret")) as server:
        required = " sslmode=require channel_binding=require"
        assert identify(server.address.conninfo(password="s3cret") + required) == (True, "replwire")
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            identify(server.address.conninfo(password="wrong") + required)
    with Server(tiny_source(), settings=ServeSettings(160000, password="s3cret")) as server:  # no TLS: no binding
        with pytest.raises(psycopg2.OperationalError, match="channel binding"):
            identify(server.address.conninfo(password="s3cret") + " channel_binding=require")


def test_the_binding_data_is_the_certificates_sha256(pki):
    """RFC 5929: the hash of the DER certificate by its signature's hash (ECDSA with SHA-256 here), as the
    openssl command computes it."""
    der = subprocess.run(["openssl", "x509", "-in", str(pki / "server.pem"), "-outform", "DER"], check=True,
                         capture_output=True, timeout=60).stdout
    digest = subprocess.run(["openssl", "dgst", "-sha256", "-binary"], input=der, check=True, capture_output=True,
                            timeout=60).stdout
    assert certificate_binding(der) == digest
    with pytest.raises(ValueError):
        certificate_binding(der[:40])  # (a truncated certificate: refused, never read past its end)


def test_binding_flags_when_the_server_binds():
    scram = ScramExchange(ScramSecret.from_password("pw", salt=b"s" * 16), binding=b"x" * 32)
    with pytest.raises(AuthenticationFailed, match="negotiation error"):
        scram.first(b"y,,n=,r=abc")  # (it could bind and thinks we cannot: the -PLUS offer was removed)
    with pytest.raises(AuthenticationFailed, match="SCRAM-SHA-256-PLUS"):
        scram.first(b"p=tls-server-end-point,,n=,r=abc")  # binding asked for with the plain mechanism
    plus = ScramExchange(ScramSecret.from_password("pw", salt=b"s" * 16), binding=b"x" * 32,
                         mechanism="SCRAM-SHA-256-PLUS")
    with pytest.raises(AuthenticationFailed, match="unsupported SCRAM channel-binding type"):
        plus.first(b"p=tls-unique,,n=,r=abc")
    with pytest.raises(AuthenticationFailed, match="without channel binding"):
        plus.first(b"n,,n=,r=abc")


@pytest.mark.parametrize("sslmode", ["require", "prefer", "disable"])
def test_a_client_refused_for_the_limit_is_told_why_whatever_its_sslmode(pki, sslmode):
    """Over the connection limit, a client that asked for TLS is refused over TLS: libpq with
    sslmode=require shows "too many clients", not that the server "does not support SSL"."""
    with Server(tiny_source(), settings=settings(pki), max_connections=1) as server:
        held = psycopg2.connect(server.address.conninfo(), connection_factory=FACTORY)
        try:
            with pytest.raises(psycopg2.OperationalError) as refused:
                identify(server.address.conninfo() + f" sslmode={sslmode}")
        finally:
            held.close()
    assert "sorry, too many clients already" in str(refused.value)


def test_a_partial_tls_record_does_not_outlast_the_startup_timeout(pki):
    """The reviewer's sequence: an SSL request, the handshake, then the first 15 bytes of the TLS record
    holding the startup packet.  The server's read must not wait for the rest of the record for the whole
    reply timeout (600 s here): the startup timeout (1 s, counted from the connection's start) ends the
    connection however the client trickles its bytes, encrypted or not."""
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with Server(tiny_source(), settings=settings(pki, startup_timeout=1, reply_timeout=600)) as server, \
            socket.create_connection((server.address.host, server.address.port), timeout=30) as sock:
        sock.sendall(struct.pack(">ii", 8, 80877103))
        assert sock.recv(1) == b"S"
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
        while True:  # (the handshake over the raw socket, so the test decides which bytes go out)
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(outgoing.read())
                incoming.write(sock.recv(65536))
        sock.sendall(outgoing.read())
        tls.write(startup_packet(user="u", database="d", replication="database"))
        record = outgoing.read()
        assert len(record) > 15
        sock.sendall(record[:15])
        closed = False
        deadline = time.monotonic() + 30  # (far below the reply timeout: only the startup timeout ends it)
        while not closed and time.monotonic() < deadline:
            readable, _, _ = select.select([sock], [], [], 1.0)
            if readable:
                try:
                    closed = sock.recv(65536) == b""
                except ConnectionResetError:
                    closed = True
    assert closed, "a client holding back the rest of a TLS record outlasted the startup timeout"
