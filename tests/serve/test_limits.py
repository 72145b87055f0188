"""The server against bad and demanding clients, over real sockets: garbage, absurd lengths, unknown commands,
silence, crowds, wrong passwords.  Each gets an ErrorResponse, a timeout or a refusal -- and the server goes
on serving the next client, which libpq (through psycopg2) then checks.

Error codes are PostgreSQL's (Appendix A of its documentation): 08P01 protocol_violation, 42601
syntax_error, 53300 too_many_connections, 28P01 invalid_password, 0A000 feature_not_supported.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections import Counter

import psycopg2
import psycopg2.extras
import pytest

from replwire.codec import LSN, Begin, Commit, Insert, Relation, RelationColumn, Timestamp, TupleColumn
from replwire.codec.serve import Faults, ServeError, Server, ServeSettings, Session, Slots, Source
from replwire.codec.serve.errors import ProtocolViolation
from replwire.codec.serve.frontend import FrontendReader

#: Connections opened at once by the crowd test (the server takes 6).
CROWD = 1000


def tiny_source() -> Source:
    """One relation, one committed insert."""
    relation = Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])
    stamp = Timestamp(800_000_000_000_000)
    return Source.from_messages([
        Begin(final_lsn=LSN(0x1000), commit_time=stamp, xid=700), relation,
        Insert(relation_id=16384, new=[TupleColumn.text("1")]),
        Commit(flags=0, commit_lsn=LSN(0x1000), end_lsn=LSN(0x1010), commit_time=stamp),
    ], proto_version=1, server_version=160000)


def startup_packet(**parameters: str) -> bytes:
    body = struct.pack(">i", 196608) + b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in parameters.items())
    body += b"\0"
    return struct.pack(">i", len(body) + 4) + body


def read_messages(sock: socket.socket, timeout: float = 10.0) -> list[tuple[bytes, bytes]]:
    """Everything the server sends until it closes the connection or goes quiet for a second."""
    sock.settimeout(1.0)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    out, i = [], 0
    while i + 5 <= len(data):
        kind, length = data[i:i + 1], struct.unpack_from(">i", data, i + 1)[0]
        out.append((kind, data[i + 5:i + 1 + length]))
        i += 1 + length
    return out


def error_code(body: bytes) -> str:
    fields = dict((f[:1], f[1:].decode()) for f in body.split(b"\0") if f)
    return fields[b"C"]


def closed(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the server closes ``sock`` within ``timeout`` seconds (what it sends meanwhile is read).

    (``TimeoutError`` is an ``OSError``: it must be caught first, or a socket left open counts as closed.)"""
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(65536):
                return True
        return False
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def served(server: Server) -> list[tuple]:
    """A well-behaved client (libpq, through psycopg2) runs IDENTIFY_SYSTEM."""
    conn = psycopg2.connect(server.address.conninfo(), connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        cur = conn.cursor()
        cur.execute("IDENTIFY_SYSTEM")
        return cur.fetchall()
    finally:
        conn.close()


@pytest.fixture
def server():
    with Server(tiny_source(), settings=ServeSettings(160000, reply_timeout=2, startup_timeout=2,
                                                      keepalive_interval=0.5), max_connections=6) as running:
        yield running


def test_a_garbage_startup_packet_gets_an_error_and_the_server_goes_on(server):
    with socket.create_connection((server.address.host, server.address.port)) as sock:
        sock.sendall(struct.pack(">i", 16) + b"GARBAGE!garbage!"[:12])
        messages = read_messages(sock)
    assert [kind for kind, _ in messages] == [b"E"]
    assert error_code(messages[0][1]) == "0A000"  # an unsupported protocol version
    with socket.create_connection((server.address.host, server.address.port)) as sock:
        sock.sendall(struct.pack(">i", 7))  # shorter than any startup packet
        messages = read_messages(sock)
    assert error_code(messages[0][1]) == "08P01"
    assert served(server)[0][3] == "replwire"


def test_a_2gib_length_claim_is_refused_without_waiting_for_it(server):
    with socket.create_connection((server.address.host, server.address.port)) as sock:
        sock.sendall(startup_packet(user="u", database="d", replication="database"))
        assert read_messages(sock)[-1][0] == b"Z"
        sock.sendall(b"Q" + struct.pack(">i", 2**31 - 1) + b"SELECT")
        messages = read_messages(sock)  # (a server waiting for the 2 GiB would send nothing)
    assert [kind for kind, _ in messages] == [b"E"]
    assert error_code(messages[0][1]) == "08P01"
    assert served(server)


def test_the_reader_holds_no_more_than_it_was_sent():
    reader = FrontendReader(max_message=1 << 20)
    reader.feed(startup_packet(user="u"))
    assert reader.next() is not None
    reader.feed(b"d" + struct.pack(">i", 2**31 - 1))
    with pytest.raises(ProtocolViolation, match="2147483643 bytes"):
        reader.next()
    assert reader.buffered == 5


def test_an_unknown_command_is_an_error_and_the_session_goes_on(server):
    conn = psycopg2.connect(server.address.conninfo(), connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        cur = conn.cursor()
        with pytest.raises(psycopg2.Error) as raised:
            cur.execute("FROBNICATE THE WAL")
        assert raised.value.pgcode == "42601"
        cur.execute("IDENTIFY_SYSTEM")
        assert cur.fetchall()[0][3] == "replwire"
    finally:
        conn.close()


def test_a_client_that_never_replies_is_dropped(server):
    with socket.create_connection((server.address.host, server.address.port)) as sock:
        sock.sendall(startup_packet(user="u", database="d", replication="database"))
        read_messages(sock)
        command = b"START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'p')\0"
        sock.sendall(b"Q" + struct.pack(">i", len(command) + 4) + command)
        assert closed(sock, timeout=15), "the server kept a silent client"
    with socket.create_connection((server.address.host, server.address.port)) as sock:
        assert closed(sock, timeout=15), "the server kept a client that never sent its startup packet"
    assert served(server)


def test_a_crowd_of_connections_is_refused_beyond_the_limit(server):
    crowd = []
    try:
        for _ in range(CROWD):  # each sends its startup packet at once, as clients do
            crowd.append(socket.create_connection((server.address.host, server.address.port)))
            crowd[-1].sendall(startup_packet(user="u", database="d", replication="database"))
        outcomes: Counter[str] = Counter()
        for sock in crowd:
            messages = read_messages(sock, timeout=3)
            if messages and messages[0][0] == b"E" and error_code(messages[0][1]) == "53300":
                outcomes["refused"] += 1
            elif messages and messages[0] == (b"R", bytes(4)):  # AuthenticationOk: taken
                outcomes["served"] += 1  # (a session whose client stays silent ends, freeing its place)
            else:
                outcomes[repr(messages[:1])] += 1
        assert set(outcomes) == {"served", "refused"}, outcomes
        assert outcomes["refused"] >= CROWD * 9 // 10
    finally:
        for sock in crowd:
            sock.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the crowd's sessions end as their sockets close
        try:
            assert served(server)
            break
        except psycopg2.OperationalError:
            time.sleep(0.2)
    else:
        pytest.fail("the server did not serve again after the crowd left")


def test_start_replication_options_are_checked_as_pgoutput_does(server):
    def start(options: dict[str, str]) -> None:
        conn = psycopg2.connect(server.address.conninfo(),
                                connection_factory=psycopg2.extras.LogicalReplicationConnection)
        try:
            conn.cursor().start_replication(slot_name="s", decode=False, options=options)
        finally:
            conn.close()

    with pytest.raises(psycopg2.Error, match="proto_version=5 but server only supports protocol 4"):
        start({"proto_version": "5", "publication_names": "p"})
    with pytest.raises(psycopg2.Error, match="does not support streaming"):
        start({"proto_version": "1", "publication_names": "p", "streaming": "on"})
    with pytest.raises(psycopg2.Error, match="binary values were asked for"):
        start({"proto_version": "1", "publication_names": "p", "binary": "true"})
    assert served(server)


def test_a_password_is_checked_with_scram():
    settings = ServeSettings(160000, password="s3cret")
    with Server(tiny_source(), settings=settings) as server:
        factory = psycopg2.extras.LogicalReplicationConnection
        conn = psycopg2.connect(server.address.conninfo(password="s3cret"), connection_factory=factory)
        conn.close()
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            psycopg2.connect(server.address.conninfo(password="wrong"), connection_factory=factory)


def test_another_address_than_loopback_needs_a_password():
    with pytest.raises(ServeError, match="needs a password"):
        Server(tiny_source(), host="0.0.0.0")
    Server(tiny_source(), host="0.0.0.0", settings=ServeSettings(160000, password="x")).close()


def test_disconnect_every_drops_each_connection_after_that_many_messages():
    with Server(tiny_source(), settings=ServeSettings(160000), faults=Faults(disconnect_every=2)) as server:
        for _ in range(2):  # every connection, not just the first
            conn = psycopg2.connect(server.address.conninfo(),
                                    connection_factory=psycopg2.extras.LogicalReplicationConnection)
            received = []
            try:
                cur = conn.cursor()
                cur.start_replication(slot_name="s", decode=False, options={"proto_version": "1",
                                                                              "publication_names": "p"})
                with pytest.raises(psycopg2.Error):
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline:
                        message = cur.read_message()
                        if message is None:
                            time.sleep(0.02)
                        else:
                            received.append(bytes(message.payload))
            finally:
                conn.close()
            assert len(received) == 2


def test_replication_slots_are_created_and_dropped_as_asked(server):
    conn = psycopg2.connect(server.address.conninfo(), connection_factory=psycopg2.extras.LogicalReplicationConnection)
    try:
        cur = conn.cursor()
        cur.create_replication_slot("made", output_plugin="pgoutput")
        slot_name, consistent_point, _, plugin = cur.fetchone()
        assert (slot_name, plugin) == ("made", "pgoutput")
        # where the stream served starts, so a client starting there gets all of it: the tiny source's first
        # message, which Source.from_messages places at 1 (one past 0)
        assert consistent_point == "0/1"
        cur.drop_replication_slot("made")
        with pytest.raises(psycopg2.Error) as raised:
            cur.create_replication_slot("physical", slot_type=psycopg2.extras.REPLICATION_PHYSICAL)  # not served
        assert raised.value.pgcode == "0A000"
    finally:
        conn.close()


def test_the_startup_timeout_counts_from_the_connection_not_from_its_last_byte():
    """A client sending its startup packet a byte at a time, each well within the timeout, is still dropped
    once the timeout has passed since it connected (PostgreSQL's ``authentication_timeout``)."""
    session = Session(tiny_source(), ServeSettings(160000, startup_timeout=10), Slots(), pid=1, cancel_key=0,
                      now=1000.0)
    packet = startup_packet(user="u", database="d", replication="database", application_name="x" * 100)
    for second, byte in enumerate(packet[:-1], start=1):  # one byte a second, never silent for 10
        session.receive(bytes([byte]), now=1000.0 + second)
        if not session.closed:
            assert session.next_deadline() == 1010.0  # (when the server's loop wakes it up)
        session.tick(1000.0 + second)
        if session.closed:
            break
    assert session.closed, "a client trickling its startup packet kept its place"
    assert session.close_reason == "canceling authentication due to timeout"
    assert b"08006" in session.output()


def test_a_client_trickling_its_startup_packet_is_dropped(server):
    """Over a socket: the fixture's server times a startup out after 2 s; the packet here takes 100 sends,
    each after waiting up to 0.2 s for the server to close the connection."""
    packet = startup_packet(user="u", database="d", replication="database", application_name="x" * 100)
    with socket.create_connection((server.address.host, server.address.port)) as sock:
        for byte in packet[:100]:
            sock.sendall(bytes([byte]))
            readable, _, _ = select.select([sock], [], [], 0.2)
            if readable:
                break
        messages = read_messages(sock)
    assert messages and messages[0][0] == b"E", "the server kept a client trickling its startup packet"
    assert error_code(messages[0][1]) == "08006"
    assert served(server)


def test_an_empty_password_is_refused():
    for host in ("127.0.0.1", "0.0.0.0"):
        with pytest.raises(ServeError, match="empty password"):
            Server(tiny_source(), host=host, settings=ServeSettings(160000, password=""))


def test_a_client_refused_for_the_limit_is_told_why_after_its_ssl_request():
    """libpq (sslmode=prefer, its default) asks for SSL first: it must be told ``N``, then "too many clients",
    not get the error as the answer to its SSL request ("server sent an error response during SSL
    exchange")."""
    with Server(tiny_source(), settings=ServeSettings(160000), max_connections=1) as server:
        factory = psycopg2.extras.LogicalReplicationConnection
        held = psycopg2.connect(server.address.conninfo(), connection_factory=factory)
        try:
            with pytest.raises(psycopg2.OperationalError) as refused:
                psycopg2.connect(server.address.conninfo() + " sslmode=prefer", connection_factory=factory)
        finally:
            held.close()
    assert "sorry, too many clients already" in str(refused.value)
    assert "SSL" not in str(refused.value)


@pytest.mark.parametrize("password, given", [
    ("\u2168", "\u2168"),  # ROMAN NUMERAL NINE: NFKC makes it "IX" (RFC 4013, section 3, example 5)
    ("I\u00adX", "IX"),  # SOFT HYPHEN is mapped to nothing (example 1)
    ("\u00aa", "a"),  # FEMININE ORDINAL INDICATOR: "a" (example 4)
    ("pa\u0308ss", "p\u00e4ss"),  # a decomposed a-umlaut, composed by NFKC
    ("\u0627\u0031", "\u0627\u0031"),  # fails the bidirectional check (example 7): used as it is, both sides
], ids=["nfkc", "mapped-to-nothing", "ordinal", "composed", "bidi-fails"])
def test_a_non_ascii_password_is_prepared_as_libpq_prepares_it(password, given):
    """libpq runs the password through SASLprep before SCRAM (and uses it as it is when SASLprep refuses
    it), as the server must: a correct non-ASCII password is accepted."""
    with Server(tiny_source(), settings=ServeSettings(160000, password=password)) as server:
        factory = psycopg2.extras.LogicalReplicationConnection
        psycopg2.connect(server.address.conninfo(password=given), connection_factory=factory).close()
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            psycopg2.connect(server.address.conninfo(password=given + "x"), connection_factory=factory)
