"""The naive way to decode a change stream to JSON, streaming-aware: what a programmer writes by hand in an afternoon.

    python bench/naive_stream_decode.py STREAM.csv > changes.jsonl

Reads the CSV that ``COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO STDOUT
WITH (FORMAT csv)`` writes, for any protocol version 1-4, and parses each message with ``struct`` at fixed
offsets: Begin, Commit, Origin, Relation, Type, Insert, Update (with the old key ``K`` or old image ``O``),
Delete, Truncate, Message; Stream Start/Stop/Commit/Abort (a Stream Abort of a subtransaction drops the
changes from that subtransaction's first one on, as PostgreSQL's own apply worker does; protocol 4's
parallel abort carries an abort LSN and time, not read); Begin Prepare, Prepare, Commit Prepared, Rollback
Prepared and Stream Prepare.  Changes are buffered per top-level transaction and printed when it commits,
one ``json.dumps`` per change (one per table for a truncate), values left as the server's text -- or, in
binary mode, as the hex of the bytes the server sent: no typing.  No checks: no bounds, no versions, no
flags.  The yardstick ``python -m bench realschema`` times ``replwire decode`` against.  Standalone on
purpose: it imports nothing from replwire.
"""

import datetime
import json
import struct
import sys

EPOCH = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
I16 = struct.Struct(">H")
I32 = struct.Struct(">I")
Q = struct.Struct(">Q")
BEGIN = struct.Struct(">QqI")  # final lsn, commit time, xid
COMMIT = struct.Struct(">BQQq")  # flags, commit lsn, end lsn, commit time
STREAM_COMMIT = struct.Struct(">IBQQq")  # xid, flags, commit lsn, end lsn, commit time
STREAM_ABORT = struct.Struct(">II")  # xid, subxid (protocol 4 parallel: then abort lsn and time)
PREPARE_HEAD = struct.Struct(">BQQqI")  # flags, lsn, end lsn, time, xid (P, K, p)
BEGIN_PREPARE = struct.Struct(">QQqI")  # prepare lsn, end lsn, prepare time, xid
ROLLBACK_PREPARED = struct.Struct(">BQQqqI")  # flags, prepare end lsn, rollback end lsn, two times, xid


def lsn_text(value):
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def time_text(micros):
    return (EPOCH + datetime.timedelta(microseconds=micros)).isoformat()


def cstring(data, i):
    end = data.index(0, i)
    return data[i:end].decode(), end + 1


def tuple_data(data, i, names):
    (count,) = I16.unpack_from(data, i)
    i += 2
    row = {}
    for n in range(count):
        kind = data[i]
        i += 1
        if kind == 0x6E:  # n
            row[names[n]] = None
        elif kind == 0x75:  # u: unchanged TOAST
            continue
        else:
            (length,) = I32.unpack_from(data, i)
            i += 4
            value = data[i:i + length]
            row[names[n]] = value.hex() if kind == 0x62 else value.decode()  # b: binary
            i += length
    return row, i


class Decoder:
    def __init__(self, out):
        self.out = out
        self.relations = {}
        self.in_stream = False
        self.stream_xid = None
        self.xid = None  # the plain (or prepared) transaction being read
        self.changes = []  # its changes
        self.streamed = {}  # top-level xid -> [changes], and where each subtransaction began
        self.first = {}  # top-level xid -> {subxid: index of its first change}
        self.prepared = {}  # xid -> changes of a prepared transaction, until COMMIT/ROLLBACK PREPARED

    def emit(self, changes, xid, commit_lsn, commit_time):
        shared = {"xid": xid, "commit_lsn": lsn_text(commit_lsn), "commit_time": time_text(commit_time)}
        write = self.out.write
        for change in changes:
            change.update(shared)
            write(json.dumps(change) + "\n")

    def add(self, change, xid):
        """A change: into the streamed transaction's buffer inside a stream block, else the open one's."""
        if self.in_stream:
            top = self.stream_xid
            buffered = self.streamed.setdefault(top, [])
            if xid != top:
                self.first.setdefault(top, {}).setdefault(xid, len(buffered))
            buffered.append(change)
        else:
            self.changes.append(change)

    def message(self, lsn, data):
        tag = data[0]
        i = 1
        xid = None
        if self.in_stream and tag in b"RYIUDTM":
            (xid,) = I32.unpack_from(data, 1)
            i = 5
        if tag == 0x49 or tag == 0x55 or tag == 0x44:  # I U D
            (relid,) = I32.unpack_from(data, i)
            namespace, name, names = self.relations[relid]
            change = {"op": "insert" if tag == 0x49 else "update" if tag == 0x55 else "delete",
                      "schema": namespace, "table": name, "lsn": lsn}
            i += 4
            if data[i] == 0x4B:  # K
                change["key"], i = tuple_data(data, i + 1, names)
            elif data[i] == 0x4F:  # O
                change["old"], i = tuple_data(data, i + 1, names)
            if i < len(data) and data[i] == 0x4E:  # N
                change["new"], i = tuple_data(data, i + 1, names)
            self.add(change, xid)
        elif tag == 0x42:  # B
            _, _, self.xid = BEGIN.unpack_from(data, 1)
            self.changes = []
        elif tag == 0x43:  # C
            _, commit_lsn, _, commit_time = COMMIT.unpack_from(data, 1)
            self.emit(self.changes, self.xid, commit_lsn, commit_time)
            self.changes = []
        elif tag == 0x52:  # R
            (relid,) = I32.unpack_from(data, i)
            namespace, i = cstring(data, i + 4)
            name, i = cstring(data, i)
            i += 1  # replica identity
            (ncols,) = I16.unpack_from(data, i)
            i += 2
            names = []
            for _ in range(ncols):
                column, i = cstring(data, i + 1)
                names.append(column)
                i += 8  # type oid, type modifier
            self.relations[relid] = (namespace or "pg_catalog", name, names)
        elif tag == 0x53:  # S
            (self.stream_xid,) = I32.unpack_from(data, 1)
            self.in_stream = True
        elif tag == 0x45:  # E
            self.in_stream = False
        elif tag == 0x63:  # c
            xid, _, commit_lsn, _, commit_time = STREAM_COMMIT.unpack_from(data, 1)
            self.first.pop(xid, None)
            self.emit(self.streamed.pop(xid, []), xid, commit_lsn, commit_time)
        elif tag == 0x41:  # A
            xid, subxid = STREAM_ABORT.unpack_from(data, 1)
            if xid == subxid:
                self.streamed.pop(xid, None)
                self.first.pop(xid, None)
            else:
                starts = self.first.get(xid, {})
                if subxid in starts:
                    cut = starts[subxid]
                    del self.streamed[xid][cut:]
                    for sub in [s for s, at in starts.items() if at >= cut]:
                        del starts[sub]
        elif tag == 0x4F or tag == 0x59:  # O (origin), Y (type): nothing to keep
            pass
        elif tag == 0x54:  # T: one line per truncated table
            (count,) = I32.unpack_from(data, i)
            i += 5  # count, options
            for n in range(count):
                (relid,) = I32.unpack_from(data, i + 4 * n)
                namespace, name, _ = self.relations[relid]
                self.add({"op": "truncate", "schema": namespace, "table": name, "lsn": lsn}, xid)
        elif tag == 0x4D:  # M
            flags = data[i]
            (message_lsn,) = Q.unpack_from(data, i + 1)
            prefix, i = cstring(data, i + 9)
            (length,) = I32.unpack_from(data, i)
            content = data[i + 4:i + 4 + length]
            change = {"op": "message", "prefix": prefix, "content": content.hex(), "lsn": lsn_text(message_lsn)}
            if flags & 1:  # transactional
                self.add(change, xid)
            else:
                self.out.write(json.dumps(change) + "\n")
        elif tag == 0x62:  # b: Begin Prepare
            *_, self.xid = BEGIN_PREPARE.unpack_from(data, 1)
            self.changes = []
        elif tag == 0x50:  # P: Prepare
            *_, xid = PREPARE_HEAD.unpack_from(data, 1)
            self.prepared[xid] = self.changes
            self.changes = []
        elif tag == 0x70:  # p: Stream Prepare
            *_, xid = PREPARE_HEAD.unpack_from(data, 1)
            self.first.pop(xid, None)
            self.prepared[xid] = self.streamed.pop(xid, [])
        elif tag == 0x4B:  # K: Commit Prepared
            _, commit_lsn, _, commit_time, xid = PREPARE_HEAD.unpack_from(data, 1)
            self.emit(self.prepared.pop(xid, []), xid, commit_lsn, commit_time)
        elif tag == 0x72:  # r: Rollback Prepared
            *_, xid = ROLLBACK_PREPARED.unpack_from(data, 1)
            self.prepared.pop(xid, None)


def main(path):
    decoder = Decoder(sys.stdout)
    message = decoder.message
    with open(path) as source:
        for line in source:
            lsn, _, hexdata = line.rstrip("\n").split(",")
            message(lsn, bytes.fromhex(hexdata[2:]))


if __name__ == "__main__":
    main(sys.argv[1])
