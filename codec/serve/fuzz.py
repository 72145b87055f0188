"""The fuzz target of the walsender's protocol core: any bytes a client can send, in any chunks, at any time.

The invariant: :class:`~replwire.codec.serve.walsender.Session` takes whatever it is fed and answers with
protocol messages -- an ErrorResponse and a closed session for what it cannot accept -- and nothing else:
any exception out of it is a finding, and so is holding more than it was sent (its reader's buffer) or
answering with more than a bounded amount per byte received.

An input is one flags byte, then the client's bytes.  Flag bit 0 gives the server a password (SCRAM);
bit 1 puts a valid startup packet first, bit 2 also a ``START_REPLICATION`` (so the fuzzer reaches the
queries and CopyBoth without having to find a startup packet itself); the next byte says where to cut the
rest in two chunks; the session is then asked for frames and ticked forward past its timeouts.
Run by ``replwire fuzz --target replwire.codec.serve.fuzz:fuzz_session`` (which starts from :data:`SEEDS`;
``make fuzz`` runs it).
"""

from __future__ import annotations

import struct

from ..messages import (
    Begin,
    Commit,
    Insert,
    Relation,
    RelationColumn,
    StreamCommit,
    StreamStart,
    StreamStop,
    TupleColumn,
)
from ..scalars import LSN, Timestamp
from .server import FIRST_PID, Slots
from .source import Source
from .walsender import ServeSettings, Session

__all__ = ["SEEDS", "fuzz_session", "startup"]

_STAMP = Timestamp(800_000_000_000_000)
_RELATION = Relation(relation_id=16384, namespace="public", name="t", replica_identity="d",
                     columns=[RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)])
SOURCE = Source.from_messages([
    Begin(final_lsn=LSN(0x1000), commit_time=_STAMP, xid=700), _RELATION,
    Insert(relation_id=16384, new=[TupleColumn.text("1")]),
    Commit(flags=0, commit_lsn=LSN(0x1000), end_lsn=LSN(0x1010), commit_time=_STAMP),
    StreamStart(xid=701, first_segment=1), Insert(xid=701, relation_id=16384, new=[TupleColumn.text("2")]),
    StreamStop(),
    StreamCommit(xid=701, flags=0, commit_lsn=LSN(0x2000), end_lsn=LSN(0x2010), commit_time=_STAMP),
], proto_version=2, options={"streaming": "on"}, server_version=160000)
PLAIN = ServeSettings(160000, reply_timeout=5, startup_timeout=5, keepalive_interval=1, max_message=4096)
WITH_PASSWORD = ServeSettings(160000, password="pw", reply_timeout=5, startup_timeout=5, keepalive_interval=1,
                              max_message=4096)
#: Bytes of answer allowed per byte received, on top of a fixed allowance (frames of the small source included).
ANSWER_PER_BYTE = 64
ANSWER_ALLOWANCE = 64 * 1024


def startup(**parameters: str) -> bytes:
    body = struct.pack(">i", 196608) + b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in parameters.items())
    return struct.pack(">i", len(body) + 5) + body + b"\0"


def query(text: str) -> bytes:
    body = text.encode() + b"\0"
    return b"Q" + struct.pack(">i", len(body) + 4) + body


_STARTUP = startup(user="fuzz", database="db", replication="database")
_START = query("START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '2', publication_names 'p', streaming 'on')")

#: Inputs to start from: each state of the session reached with valid bytes.
SEEDS = [
    b"\x00" + b"\x00" + _STARTUP + query("IDENTIFY_SYSTEM"),
    b"\x02\x00" + query("SELECT pg_catalog.set_config('search_path', '', false);"),
    b"\x02\x00" + query("SELECT DISTINCT t.schemaname, t.tablename, t.attnames "
                      "FROM pg_catalog.pg_publication_tables t"),
    b"\x02\x00" + query("CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'nothing')") + query("SHOW x"),
    b"\x04\x00" + b"d" + struct.pack(">i", 38) + b"r" + bytes(8 * 4) + b"\x01" + b"c\x00\x00\x00\x04",
    b"\x01\x00" + _STARTUP + b"p" + struct.pack(">i", 4 + 14 + 4 + 10) + b"SCRAM-SHA-256\0" + struct.pack(">i", 10)
    + b"n,,n=,r=ab",
]


def fuzz_session(data: bytes) -> None:
    if len(data) < 2:
        return
    flags, cut = data[0], data[1]
    body = data[2:]
    if flags & 6:
        body = _STARTUP + (_START if flags & 4 else b"") + body
    session = Session(SOURCE, WITH_PASSWORD if flags & 1 else PLAIN, Slots(), pid=FIRST_PID, cancel_key=0, now=1000.0)
    cut = min(cut, len(body))
    received, answered = 0, 0
    for now, chunk in ((1000.0, body[:cut]), (1001.0, body[cut:])):
        if not chunk:
            continue
        session.receive(chunk, now)
        received += len(chunk)
        if session.reader.buffered > received:
            raise AssertionError(f"the reader holds {session.reader.buffered} bytes after {received} were sent")
        for _ in range(20):
            if session.frame(now) is None:
                break
        session.tick(now)
        answered += len(session.output())
    for now in (1003.0, 1010.0):
        session.tick(now)
        answered += len(session.output())
    if answered > ANSWER_ALLOWANCE + ANSWER_PER_BYTE * received:
        raise AssertionError(f"{answered} bytes answered to {received} received")
    if not session.closed:
        raise AssertionError(f"a session silent past its timeouts is still open ({session.phase.value})")
