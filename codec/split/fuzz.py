"""The fuzz target of the compiled row path (``rows_run`` of the compiled codec): any bytes, read as COPY-CSV
rows or as capture file records.

The invariant: ``rows_run`` takes any input without a crash (``make fuzz-compiled`` runs it under
AddressSanitizer and UndefinedBehaviorSanitizer, so a read out of bounds is a finding), takes no more than
it was given, counts as many records as it took, and what it writes is JSON lines, each an object with the
keys a change's line has.  An input is one flags byte, then the records: bit 0 reads them as capture
records (else COPY-CSV rows), bit 1 says they end the input, bits 2-3 give the protocol version.  One
relation (16384) is known, with a column of each way a value is written (text, integer, bool, through a
function, and the types written in C: numeric, uuid, bytea, date, time, timestamp(tz)); the seeds are a
few plain transactions over it in both forms, so that the fuzzer starts inside the row path.  Run by
``python -m replwire.codec.split.fuzz DIR`` (the seeds) and ``replwire fuzz --target
replwire.codec.split.fuzz:fuzz_rows --corpus DIR`` (``make fuzz-compiled`` does both, on the compiled codec).
"""

from __future__ import annotations

import json
from typing import Any

from ..io.capture_file import encode_record, record_frame
from ..messages import Begin, Commit, Delete, Insert, TupleColumn, Update
from ..scalars import LSN, Timestamp
from ..wire.fast import ROWS, build

__all__ = ["SEEDS", "fuzz_rows", "write_seeds"]

_RELATION = 16384
#: The relation's columns: a name and a way of writing for each way there is (jsonl._WAYS), and a text value.
_COLUMNS = (("id", 2), ("name", 1), ("ok", 3), ("n", 4), ("num", 5), ("u", 6), ("b", 7), ("d", 8), ("t", 9),
            ("ts", 10), ("tz", 11))
_VALUES = ("1", "x\n\"1é", "t", "1.5", "-12.50", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "\\x00Ff", "2024-02-29",
           "12:00:00.5", "2024-02-29 12:00:00", "2024-02-29 12:00:00.123+00")
_KEYS = ("op", "schema", "table", "xid", "lsn", "commit_lsn", "commit_time")


def _plans() -> dict[int, Any]:
    if ROWS is None:
        return {}
    starts = tuple(f'{{"op":"{op}","schema":"public","table":"t","xid":'.encode() for op in ("insert", "update",
                                                                                             "delete"))
    def call(data: bytes) -> str:
        return json.dumps(data.decode("latin-1"))

    columns = tuple((f'"{name}":'.encode(), way, name == "id", call, name) for name, way in _COLUMNS)
    return {_RELATION: ROWS.rows_plan(starts, columns)}


_PLANS = _plans()


def _transactions() -> list[tuple[int, bytes]]:
    def row(i: int) -> list[TupleColumn]:
        return [TupleColumn.text(str(i)), *(TupleColumn.text(value) for value in _VALUES[1:])]

    stamp = Timestamp(800_000_000_000_000)
    messages = [Begin(final_lsn=LSN(0x1000), commit_time=stamp, xid=700),
                Insert(relation_id=_RELATION, new=row(1)),
                Update(relation_id=_RELATION, key=None, new=[*row(2)[:3], TupleColumn.unchanged_toast(), *row(2)[4:]]),
                Delete(relation_id=_RELATION, key=[TupleColumn.text("1"), *[TupleColumn.null()] * (len(_COLUMNS) - 1)]),
                Commit(flags=0, commit_lsn=LSN(0x1000), end_lsn=LSN(0x1010), commit_time=stamp)]
    return [(0x1000 + i, build(m, proto_version=1)) for i, m in enumerate(messages)]


def _seeds() -> list[bytes]:
    records = _transactions()
    csv = b"".join(f"{LSN(lsn)},700,\\x{data.hex()}\n".encode() for lsn, data in records)
    capture = b"".join(encode_record(lsn, 700, data) for lsn, data in records)
    return [b"\x02" + csv, b"\x00" + csv * 2, b"\x03" + capture, b"\x01" + capture * 2]


#: Inputs to start from: plain transactions in both forms, whole and not.
SEEDS = _seeds()
_FRAME = record_frame()


def fuzz_rows(data: bytes) -> None:
    if not data or ROWS is None:
        return
    flags, body = data[0], data[1:]
    frame = _FRAME if flags & 1 else None
    consumed, text, records, transactions, changes, repeated, last_end, declined = ROWS.rows_run(
        body, bool(flags & 2), _PLANS, 1 + (flags >> 2) % 4, -1, frame)
    if not 0 <= consumed <= len(body):
        raise AssertionError(f"took {consumed} bytes of {len(body)}")
    if records and consumed == 0:
        raise AssertionError(f"{records} records in no bytes")
    lines = text.splitlines()
    if len(lines) != changes or transactions + repeated > records:
        raise AssertionError(f"{len(lines)} lines for {changes} changes, {transactions}+{repeated} transactions "
                             f"of {records} records")
    for line in lines:
        change = json.loads(line)
        if list(change)[:len(_KEYS)] != list(_KEYS):
            raise AssertionError(f"not a change's line: {line}")


def write_seeds(directory: str) -> int:
    """Write :data:`SEEDS` into ``directory`` (a libFuzzer corpus for ``replwire fuzz --corpus``)."""
    import hashlib
    import os

    os.makedirs(directory, exist_ok=True)
    for seed in SEEDS:
        with open(os.path.join(directory, hashlib.sha1(seed).hexdigest()), "wb") as handle:
            handle.write(seed)
    return len(SEEDS)


if __name__ == "__main__":  # pragma: no cover -- python -m replwire.codec.split.fuzz CORPUS_DIR
    import sys

    print(f"{write_seeds(sys.argv[1])} seed inputs written to {sys.argv[1]}")
