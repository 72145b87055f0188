"""The naive way to decode a change stream to JSON: what a programmer writes by hand in an afternoon.

    python bench/naive_decode.py STREAM.csv > changes.jsonl

Reads the CSV that ``COPY (SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(...)) TO STDOUT
WITH (FORMAT csv)`` writes for protocol version 1, parses Begin, Relation, Insert, Update, Delete and Commit
with ``struct`` at fixed offsets, keeps a relation cache, buffers each transaction's changes and prints
them at its Commit, one ``json.dumps`` per change, values left as the server's text.  No checks: no
bounds, no stream state, no types, no streaming, no two-phase.  The yardstick ``python -m bench decode``
times ``replwire decode`` against.  Standalone on purpose: it imports nothing from replwire.
"""

import datetime
import json
import struct
import sys

EPOCH = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
Q = struct.Struct(">Q")
BEGIN = struct.Struct(">QqI")
COMMIT = struct.Struct(">BQQq")
I32 = struct.Struct(">I")
I16 = struct.Struct(">H")


def lsn_text(value):
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


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
            row[names[n]] = data[i:i + length].decode()
            i += length
    return row, i


def main(path):
    relations = {}
    changes = []
    xid = None
    out = sys.stdout
    with open(path) as source:
        for line in source:
            lsn, _, hexdata = line.rstrip("\n").split(",")
            data = bytes.fromhex(hexdata[2:])
            tag = data[0]
            if tag == 0x42:  # B
                _, _, xid = BEGIN.unpack_from(data, 1)
                changes = []
            elif tag == 0x52:  # R
                (relid,) = I32.unpack_from(data, 1)
                namespace, i = cstring(data, 5)
                name, i = cstring(data, i)
                i += 1  # replica identity
                (ncols,) = I16.unpack_from(data, i)
                i += 2
                names = []
                for _ in range(ncols):
                    column, i = cstring(data, i + 1)
                    names.append(column)
                    i += 8  # type oid, type modifier
                relations[relid] = (namespace or "pg_catalog", name, names)
            elif tag in (0x49, 0x55, 0x44):  # I U D
                (relid,) = I32.unpack_from(data, 1)
                namespace, name, names = relations[relid]
                change = {"op": {0x49: "insert", 0x55: "update", 0x44: "delete"}[tag], "schema": namespace,
                          "table": name, "lsn": lsn}
                i = 5
                if data[i] in (0x4B, 0x4F):  # K or O
                    change["key"], i = tuple_data(data, i + 1, names)
                if i < len(data) and data[i] == 0x4E:  # N
                    change["new"], i = tuple_data(data, i + 1, names)
                changes.append(change)
            elif tag == 0x43:  # C
                _, commit_lsn, _, commit_time = COMMIT.unpack_from(data, 1)
                shared = {"xid": xid, "commit_lsn": lsn_text(commit_lsn),
                          "commit_time": (EPOCH + datetime.timedelta(microseconds=commit_time)).isoformat()}
                for change in changes:
                    change.update(shared)
                    out.write(json.dumps(change) + "\n")
                changes = []


if __name__ == "__main__":
    main(sys.argv[1])
