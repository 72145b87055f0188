"""Peak memory of assembling one large streamed transaction (synthetic, default 1 GiB of Insert messages).

Strategy: a generator builds every message with replwire's ``build`` as it is needed (Stream Start, a
Relation, then Inserts carrying ~1 KiB of text each, in Stream Start...Stop blocks of 1000, a rolled-back
subtransaction in the middle, then Stream Commit), so the input itself is never held; the Assembler
buffers the transaction (spilling past its threshold), emits it on Stream Commit, and the changes are read
back one by one.  Peak RSS comes from ``getrusage`` (the whole process, interpreter included).

    python bench/assembler_memory.py [--gib 1.0] [--threshold-mib 64] [--row-bytes 1000]
"""

from __future__ import annotations

import argparse
import resource
import time

from replwire.codec import (
    LSN,
    Assembler,
    Insert,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    TupleColumn,
    build,
)

XID, SUBXID, REL = 5000, 5001, 16385


def messages(total_bytes: int, row_bytes: int):
    """(bytes, lsn) of one streamed transaction of about ``total_bytes`` of Insert messages."""
    payload = "x" * row_bytes
    relation = Relation(xid=XID, relation_id=REL, namespace="public", name="big", replica_identity="d",
                        columns=[RelationColumn(flags=1, name="id", type_id=20, type_modifier=-1),
                                 RelationColumn(flags=0, name="payload", type_id=25, type_modifier=-1)])
    lsn = 0x1000000
    count = 0
    sent = 0
    yield build(StreamStart(xid=XID, first_segment=1), proto_version=2), None
    yield build(relation, proto_version=2, in_stream=True), None
    while sent < total_bytes:
        if count and count % 1000 == 0:
            yield build(StreamStop(), proto_version=2), None
            yield build(StreamStart(xid=XID, first_segment=0), proto_version=2), None
        sub = SUBXID if 1000 <= count < 2000 else XID  # one block belongs to a subtransaction, rolled back
        data = build(Insert(xid=sub, relation_id=REL, new=[TupleColumn.text(str(count)), TupleColumn.text(payload)]),
                     proto_version=2, in_stream=True)
        lsn += len(data)
        sent += len(data)
        count += 1
        yield data, lsn
    yield build(StreamStop(), proto_version=2), None
    yield build(StreamAbort(xid=XID, subxid=SUBXID), proto_version=2), None
    yield build(StreamCommit(xid=XID, flags=0, commit_lsn=LSN(lsn + 1), end_lsn=LSN(lsn + 64), commit_time=0),
                proto_version=2), lsn + 64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--threshold-mib", type=float, default=64)
    parser.add_argument("--row-bytes", type=int, default=1000)
    parser.add_argument("--typed", action="store_true", help="load values through psycopg (default: untyped)")
    args = parser.parse_args()
    total = int(args.gib * 2**30)
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    asm = Assembler(proto_version=2, spill_threshold=int(args.threshold_mib * 2**20), typed=args.typed)
    t0 = time.perf_counter()
    fed = 0
    transactions = []
    for data, lsn in messages(total, args.row_bytes):
        fed += len(data)
        transactions += asm.feed(data, lsn=lsn)
    t1 = time.perf_counter()
    (txn,) = transactions
    n = expected = 0
    for change in txn.changes:
        assert change.new["id"] == (str(expected) if not args.typed else expected), (change.new["id"], expected)
        n += 1
        expected += 1
        if expected == 1000:
            expected = 2000  # the rolled-back subtransaction's block is skipped
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"fed {fed / 2**30:.2f} GiB in {fed and n + 1000} messages; spilled={txn.changes.spilled}; "
          f"{n} changes read back")
    print(f"assemble {t1 - t0:.1f} s ({(n + 1000) / (t1 - t0):,.0f} msg/s), read back {t2 - t1:.1f} s "
          f"({n / (t2 - t1):,.0f} changes/s)")
    print(f"peak RSS {peak / 1024:.0f} MiB (at start {start_rss / 1024:.0f} MiB); "
          f"threshold {args.threshold_mib:g} MiB")


if __name__ == "__main__":
    main()
