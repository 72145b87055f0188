"""The fuzz target of the compiled codec's readers of whole inputs -- the row path (``rows_run``) and the
first pass of split decoding (``skim_run``): any bytes, read as COPY-CSV rows or as capture file records.

The invariant: ``rows_run`` takes any input without a crash (``make fuzz-compiled`` runs it under
AddressSanitizer and UndefinedBehaviorSanitizer, so a read out of bounds is a finding), takes no more than
it was given, counts as many records as it took, and what it writes is JSON lines, each an object with the
keys a change's line has.  An input is one flags byte, then the records: bit 0 reads them as capture
records (else COPY-CSV rows), bit 1 says they end the input, bits 2-3 give the protocol version.  One
relation (16384) is known, with a column of each way a value is written (text, integer, bool, through a
function, and the types written in C: numeric, uuid, bytea, date, time, timestamp(tz)); the seeds are a
few plain transactions over it in both forms (and two-phase ones: ``rows_run`` is told no prepared
transaction waits, so it takes those committed or rolled back right after their Prepare), so that the fuzzer
starts inside the row path.  The same bytes then go to ``skim_run``: its counts add up and stay inside the
input, and, written to a file (after a capture file header), every run it reads is the run the Python
reading makes of it (bits 4-7 of the flags byte choose the run length), and it declines wherever the Python
reading reports a tail or raises.  Run by ``replwire fuzz --target replwire.codec.split.fuzz:fuzz_rows``
(which starts from :data:`SEEDS`; ``make fuzz-compiled`` runs it on the compiled codec built with the
sanitizers).

The same input goes to the column path (``rows_columns``), which must take no more than ``rows_run`` took
and give buffers of Arrow's layout for as many rows as it says, every text UTF-8; with every transaction
wanted (bit 4 clear: every offset is in its outcomes) and none repeated, where it took as much as
``rows_run`` its row images are those of ``rows_run``'s lines; with none wanted, no rows.  Given the router's
open streamed transactions and the streamed transactions' facts too, it takes at least as much, stream blocks,
Stream Commits and Stream Aborts besides (the seeds have a streamed transaction of protocols 2 and 4), keeps
the open streamed transactions as xids to keys inside the input, hands back only Relations that are the plans'
but for the xid, and gives each streamed row the facts given and a subxid, each plain row none.

The input's length picks what ``rows_run`` reads its text as (its ``encoding`` and its plans'): UTF-8, LATIN1
or SQL_ASCII; its lines are UTF-8 whichever it is (the column path is held to its lines only for UTF-8).

With bit 7 set, ``rows_run`` writes Debezium's events (a relation's plan of that form): as many as it
counts changes, each with before, after and source first, a tombstone after a delete's.  And the input
goes to the body path (``rows_body``, then ``rows_join``), walked over the input as the row path walks it:
each record it hands back is stepped over and the rest given to it again, as stream block bodies if bit 6
is set, rendering Debezium's events if bit 7 is; its counts add up and stay inside the input, its run joins
(``rows_join``, ``rows_join_debezium``) into as many JSON lines of a change or events as it took records
(and a tombstone per delete), less those of a subtransaction left out; and the joins of any bytes are lines
or a ValueError.
"""

from __future__ import annotations

import json
from array import array
from typing import Any

from ..io.capture_file import CaptureFileError, CaptureHeader, encode_header, encode_record
from ..io.record_plan import record_frame
from ..messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Origin,
    Prepare,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    TupleColumn,
    Update,
)
from ..scalars import LSN, Timestamp
from ..wire.fast import COMPILED, build
from ..wire.gen.column_buffers import BUFFERS
from ..wire.gen.row_ways import ARRAY, ARRAY_ELEMENTS, BINARY_ARRAY, BINARY_WAYS, TEXT_WAYS

__all__ = ["SEEDS", "fuzz_rows"]

_RELATION = 16384
#: The relation's columns: a name and a way of writing for each way there is (row_ways), and a text value;
#: the columns named here are arrays of their way's elements.
_ARRAYS = ("as", "ai", "ab", "an", "au", "af")
_COLUMNS = tuple((name, ARRAY + TEXT_WAYS[way] if name in _ARRAYS else TEXT_WAYS[way])
                 for name, way in (("id", "int"), ("name", "string"), ("ok", "bool"), ("n", "call"), ("num", "numeric"),
                                   ("u", "uuid"), ("b", "bytea"), ("d", "date"), ("t", "time"), ("ts", "timestamp"),
                                   ("tz", "timestamptz"), ("f", "float"), ("iv", "interval"), ("as", "string"),
                                   ("ai", "int"), ("ab", "bool"), ("an", "numeric"), ("au", "uuid"), ("af", "float")))
_VALUES = ("1", "x\n\"1é", "t", "1.5", "-12.50", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "\\x00Ff", "2024-02-29",
           "12:00:00.5", "2024-02-29 12:00:00", "2024-02-29 12:00:00.123+00", "-1.5e-07",
           "1 year -2 mons +3 days -04:05:06.5", '{{a,"b \\"c"},{NULL,""}}', "{1,-2,NULL}", "{t,f}", "{1.50,-0.5}",
           "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "{1e+100,NaN,-Infinity}")
#: How each column's binary values are written (row_ways.BINARY_WAYS; an array's element type), and a binary
#: value of each.
_BINARY = {name: (BINARY_WAYS[way], 0) for name, way in (
    ("id", "int4"), ("name", "text"), ("ok", "bool"), ("n", "numeric"), ("num", "numeric"), ("u", "uuid"),
    ("b", "bytea"), ("d", "date"), ("t", "time"), ("ts", "timestamp"), ("tz", "timestamptz"), ("f", "float8"),
    ("iv", "interval"))}
_BINARY.update({name: (BINARY_ARRAY + BINARY_WAYS[way], element) for name, way, element in (
    ("as", "text", 25), ("ai", "int4", 23), ("ab", "bool", 16), ("an", "numeric", 1700), ("au", "uuid", 2950),
    ("af", "float4", 700))})
_BINARY_VALUES = (b"\0\0\0\1", b"x\n\"1\xc3\xa9", b"\1", b"\0\1\0\0\0\0\0\1\0\x0f", b"\0\2\0\0\x40\0\0\2\0\x0c\x13\x88",
                  bytes(range(16)), b"\0\xff", b"\0\0\x22\x40", b"\0\0\0\x0a\x7f\x3a\x5c\x40",
                  b"\0\x02\xc0\x2e\xcc\x9b\x5b\x48", b"\xff\xff\xff\xff\xff\xff\xff\xff",
                  b"\xbe\x84\x1b\x4b\x2f\x0e\x7a\x9c", b"\0\0\0\0\x0d\x69\x80\0\0\0\0\3\0\0\0\x0e",
                  b"\0\0\0\1\0\0\0\1\0\0\0\x19\0\0\0\2\0\0\0\1\0\0\0\1a\xff\xff\xff\xff",
                  b"\0\0\0\1\0\0\0\0\0\0\0\x17\0\0\0\1\0\0\0\1\0\0\0\4\xff\xff\xff\xfe",
                  b"\0\0\0\1\0\0\0\0\0\0\0\x10\0\0\0\1\0\0\0\1\0\0\0\1\1",
                  b"\0\0\0\1\0\0\0\0\0\0\x06\xa4\0\0\0\1\0\0\0\1\0\0\0\x08\0\0\0\0\xc0\0\0\0",
                  b"\0\0\0\1\0\0\0\0\0\0\x0b\x86\0\0\0\1\0\0\0\1\0\0\0\x10" + bytes(range(16)),
                  b"\0\0\0\1\0\0\0\0\0\0\x02\xbc\0\0\0\1\0\0\0\1\0\0\0\4\x3f\x8c\xcc\xcd")
#: The ways of the two-column relations ``_RELATION + way`` (a text, then a column of the way), whose
#: seeds end a row in an empty value: a read past the value is a read past the row.
_LAST_WAYS = (*range(2, max(TEXT_WAYS.values()) + 1), *(ARRAY + TEXT_WAYS[way] for way in ARRAY_ELEMENTS))
_KEYS = ("op", "schema", "table", "xid", "lsn", "commit_lsn", "commit_time")


def _plans(debezium: bool = False, encoding: int = 0) -> dict[int, Any]:
    """The relations' plans: for JSON lines, or (``debezium``) for Debezium's events; their text in ``encoding``
    (row_ways.ENCODINGS)."""
    if COMPILED is None:
        return {}
    starts = tuple(f'{{"op":"{op}","schema":"public","table":"t","xid":'.encode() for op in ("insert", "update",
                                                                                             "delete"))
    if debezium:
        starts = (b',"schema":"public","table":"t","txId":',) * 3
    def call(data: bytes) -> str:
        return json.dumps(data.decode("latin-1"))

    columns = tuple((f'"{name}":'.encode(), way, name == "id", call, name, *_BINARY[name])
                    for name, way in _COLUMNS)
    plans = {_RELATION: COMPILED.rows_plan(starts, columns, encoding)}
    for way in _LAST_WAYS:  # a text column, then one of the way
        plans[_RELATION + way] = COMPILED.rows_plan(starts, ((b'"s":', 1, True, call, "s"), (b'"v":', way, False, call,
                                                                                         "v")), encoding)
    return plans


_PLANS = _plans()
_DEBEZIUM_PLANS = _plans(debezium=True)
#: The plans of each encoding the row path reads (0, UTF-8: the two above), for JSON lines and Debezium's events.
_ENCODED_PLANS = {(0, False): _PLANS, (0, True): _DEBEZIUM_PLANS,
                  **{(encoding, debezium): _plans(debezium, encoding)
                     for encoding in (1, 2) for debezium in (False, True)}}


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


def _two_phase() -> list[tuple[int, bytes]]:
    """A two-phase transaction (protocol 3) committed right after its Prepare, with an Origin, then one
    rolled back right after it: ``rows_run`` takes both whole."""
    stamp = Timestamp(800_000_000_000_000)
    row = [TupleColumn.text(str(3)), *(TupleColumn.text(value) for value in _VALUES[1:])]
    prepare, end, gid = LSN(0x4000), LSN(0x4010), "g\u00e9"
    messages = [BeginPrepare(prepare_lsn=prepare, end_lsn=end, prepare_time=stamp, xid=703, gid=gid),
                Origin(origin_lsn=LSN(0x10), name="o"), Insert(relation_id=_RELATION, new=row),
                Prepare(flags=0, prepare_lsn=prepare, end_lsn=end, prepare_time=stamp, xid=703, gid=gid),
                CommitPrepared(flags=0, commit_lsn=LSN(0x4020), end_lsn=LSN(0x4030), commit_time=stamp, xid=703,
                               gid=gid),
                BeginPrepare(prepare_lsn=prepare, end_lsn=end, prepare_time=stamp, xid=704, gid=gid),
                Insert(relation_id=_RELATION, new=row),
                Prepare(flags=0, prepare_lsn=prepare, end_lsn=end, prepare_time=stamp, xid=704, gid=gid),
                RollbackPrepared(flags=0, prepare_end_lsn=LSN(0x4010), rollback_end_lsn=LSN(0x4040), prepare_time=stamp,
                                 rollback_time=stamp, xid=704, gid="g\u00e9")]
    return [(0x4000 + i, build(m, proto_version=3)) for i, m in enumerate(messages)]


def _relation(xid: int | None) -> Relation:
    """A Relation of ``_RELATION`` (a text column of each of its columns' names), in a stream block of
    ``xid`` or (``None``) outside one."""
    return Relation(xid=xid, relation_id=_RELATION, namespace="public", name="t", replica_identity="d",
                    columns=[RelationColumn(flags=0, name=name, type_id=25, type_modifier=-1) for name, _ in _COLUMNS])


def _streamed(proto_version: int) -> list[tuple[int, bytes]]:
    """A streamed transaction: two blocks (the second sends the Relation again, and has a subtransaction's
    changes, which a Stream Abort then rolls back), a top-level Stream Abort of another, and its Stream
    Commit."""
    stamp = Timestamp(800_000_000_000_000)

    def row(i: int) -> list[TupleColumn]:
        return [TupleColumn.text(str(i)), *(TupleColumn.text(value) for value in _VALUES[1:])]

    key = [TupleColumn.text("5"), *[TupleColumn.null()] * (len(_COLUMNS) - 1)]
    blocks = [(StreamStart(xid=705, first_segment=1), False),
              (Insert(xid=705, relation_id=_RELATION, new=row(5)), True),
              (Update(xid=705, relation_id=_RELATION, key=None, new=row(6)), True), (StreamStop(), True),
              (StreamStart(xid=705, first_segment=0), False),
              (_relation(705), True),  # (sent again: the same as the plans')
              (Insert(xid=706, relation_id=_RELATION, new=row(7)), True),
              (Delete(xid=705, relation_id=_RELATION, key=key), True), (StreamStop(), True),
              (StreamAbort(xid=705, subxid=706), False), (StreamAbort(xid=707, subxid=707), False),
              (StreamCommit(xid=705, flags=0, commit_lsn=LSN(0x5000), end_lsn=LSN(0x5010), commit_time=stamp), False)]
    return [(0x5000 + i, build(m, proto_version=proto_version, in_stream=in_stream))
            for i, (m, in_stream) in enumerate(blocks)]


def _binary() -> list[tuple[int, bytes]]:
    """A transaction inserting a row of binary values, one of each column's way."""
    stamp = Timestamp(0)
    messages = [Begin(final_lsn=LSN(0x3000), commit_time=stamp, xid=702),
                Insert(relation_id=_RELATION, new=[TupleColumn(kind="b", data=value) for value in _BINARY_VALUES]),
                Commit(flags=0, commit_lsn=LSN(0x3000), end_lsn=LSN(0x3010), commit_time=stamp)]
    return [(0x3000 + i, build(m, proto_version=1)) for i, m in enumerate(messages)]


def _ending_empty(way: int) -> list[tuple[int, bytes]]:
    """A transaction inserting a row of relation ``_RELATION + way`` that ends in an empty text (the row
    longer than the Begin, so that the buffer it is decoded into ends where it ends)."""
    stamp = Timestamp(0)
    messages = [Begin(final_lsn=LSN(0x2000), commit_time=stamp, xid=701),
                Insert(relation_id=_RELATION + way, new=[TupleColumn.text("x" * 24), TupleColumn.text("")]),
                Commit(flags=0, commit_lsn=LSN(0x2000), end_lsn=LSN(0x2010), commit_time=stamp)]
    return [(0x2000 + i, build(m, proto_version=1)) for i, m in enumerate(messages)]


def _seeds() -> list[bytes]:
    def csv(records: list[tuple[int, bytes]]) -> bytes:
        return b"".join(f"{LSN(lsn)},700,\\x{data.hex()}\n".encode() for lsn, data in records)

    def capture(records: list[tuple[int, bytes]]) -> bytes:
        return b"".join(encode_record(lsn, 700, data) for lsn, data in records)

    records = _transactions()
    return [b"\x02" + csv(records), b"\x00" + csv(records) * 2, b"\x03" + capture(records),
            b"\x01" + capture(records) * 2, *(b"\x02" + csv(_ending_empty(way)) for way in _LAST_WAYS),
            b"\x02" + csv(_binary()), b"\x03" + capture(_binary()), b"\x0a" + csv(_two_phase()),
            b"\x8b" + capture(_two_phase()), b"\x06" + csv(_streamed(2)), b"\x0f" + capture(_streamed(4)),
            b"\x06" + csv(_transactions() + _streamed(2) + _transactions())]


#: Inputs to start from: plain transactions in both forms, whole and not, rows ending in an empty value, a
#: row of binary values in both forms, two-phase transactions (protocol 3; the capture's as Debezium's), and
#: a streamed transaction's blocks, aborts and commit (protocols 2 and 4; once between plain transactions).
SEEDS = _seeds()
_FRAME = record_frame()


def fuzz_rows(data: bytes) -> None:
    if not data or COMPILED is None:
        return
    flags, body = data[0], data[1:]
    frame = _FRAME if flags & 1 else None
    debezium = bool(flags & 128)
    encoding = len(body) % 3  # UTF-8, LATIN1, SQL_ASCII
    consumed, data, records, transactions, changes, repeated, last_end, declined, last_commit = COMPILED.rows_run(
        body, bool(flags & 2), _ENCODED_PLANS[encoding, debezium], 1 + (flags >> 2) % 4, -1, frame,
        _EVENTS if debezium else None, True, encoding)
    text = data.decode("utf-8")  # (the lines are UTF-8, whatever the input held)
    if not 0 <= consumed <= len(body):
        raise AssertionError(f"took {consumed} bytes of {len(body)}")
    if records and consumed == 0:
        raise AssertionError(f"{records} records in no bytes")
    lines = text.splitlines()
    values = [json.loads(line) for line in lines]
    if debezium:  # events, a tombstone after each delete's
        events = [value for value in values if value is not None]
        if len(events) != changes or (last_commit >= 0) != (transactions > 0):
            raise AssertionError(f"{len(events)} events for {changes} changes, last commit {last_commit}")
        if any(list(event)[:3] != ["before", "after", "source"] for event in events):
            raise AssertionError(f"not events: {text}")
    elif len(lines) != changes or any(list(change)[:len(_KEYS)] != list(_KEYS) for change in values):
        raise AssertionError(f"{len(lines)} lines for {changes} changes: {text}")
    if transactions + repeated > records:
        raise AssertionError(f"{transactions}+{repeated} transactions of {records} records")
    _left_out(body, flags, frame, debezium, encoding, len(lines))
    _fuzz_columns(body, bool(flags & 2), 1 + (flags >> 2) % 4, frame, not flags & 16, consumed,
                  lines if not repeated and not debezium and not encoding else None)
    _skim(flags, body)
    _bodies(body, bool(flags & 2), 1 + (flags >> 2) % 4, frame, bool(flags & 64), debezium)


def _left_out(body: bytes, flags: int, frame: Any, debezium: bool, encoding: int, most: int) -> None:
    """``rows_run`` with ``_RELATION`` left out (a table filter's: its plan is its width): its changes are
    passed over, so no line is one of its rows and there are no more lines than with it."""
    plans = {**_ENCODED_PLANS[encoding, debezium], _RELATION: len(_COLUMNS)}
    consumed, data, records, transactions, changes, repeated, _, _, _ = COMPILED.rows_run(
        body, bool(flags & 2), plans, 1 + (flags >> 2) % 4, -1, frame, _EVENTS if debezium else None, True,
        encoding)
    lines = data.decode("utf-8").splitlines()
    if not 0 <= consumed <= len(body) or (records and consumed == 0) or transactions + repeated > records:
        raise AssertionError(f"left out: took {consumed} bytes of {len(body)}, {records} records, {transactions}"
                             f"+{repeated} transactions")
    ours = [] if debezium else [line for line in lines  # (_RELATION's rows have its "id"; the others "s", "v")
                                if any("id" in (row or {}) for row in map(json.loads(line).get, ("new", "key", "old")))]
    if len(lines) > most or (not debezium and len(lines) != changes) or ours:
        raise AssertionError(f"left out: {len(lines)} lines ({changes} changes) where {most} with it: {lines}")


#: What rows_run writes Debezium's events with (its ``events``): no transaction's events written before.
_EVENTS = (b',"source":{"version":"v","connector":"postgresql","name":"n","ts_ms":',
           b',"snapshot":"false","db":"","sequence":"[', True, -1)
_TAIL = b',"commit_lsn":"0/1","commit_time":"2000-01-01T00:00:00+00:00"'
#: A Debezium event's source block up to "sequence"'s change LSN, and its transaction block up to total_order.
_SOURCE = b',"source":{"version":"v","ts_ms":0,"snapshot":"false","db":"","sequence":"[null,'
_TRANSACTION = b',"transaction":{"id":"7:1","total_order":'


def _join(run: bytes, debezium: bool, dropped: set[int] | None) -> list[Any]:
    """The lines of a run, as JSON values: changes, or (``debezium``) events and tombstones (``None``)."""
    if not debezium:
        return [json.loads(line) for line in COMPILED.rows_join(run, b"7", _TAIL, dropped).splitlines()]
    per_table: dict[str, int] = {}
    data, total = COMPILED.rows_join_debezium(run, _SOURCE, b"7", _TRANSACTION, dropped, per_table, 3, True)
    events = [json.loads(line) for line in data.splitlines()]
    if total != 3 + sum(per_table.values()) or total != 3 + sum(event is not None for event in events):
        raise AssertionError(f"body: a total of {total} after {per_table} for {events}")
    return events


def _bodies(body: bytes, final: bool, proto_version: int, frame: Any, streamed: bool, debezium: bool) -> None:
    at = 0
    plans = _DEBEZIUM_PLANS if debezium else _PLANS
    while at < len(body):
        consumed, run, records, subxids, declined = COMPILED.rows_body(body[at:], final, plans, proto_version,
                                                                       streamed, frame, debezium)
        if not 0 <= consumed <= len(body) - at or (records and consumed == 0) or sum(subxids.values()) != records:
            raise AssertionError(f"body: took {consumed} bytes of {len(body) - at}, {records} records, {subxids}")
        lines = _join(run, debezium, None)
        events = [line for line in lines if line is not None]
        if len(events) != records:
            raise AssertionError(f"body: {len(events)} lines for {records} records")
        for line in events:
            if debezium:
                if list(line)[:3] != ["before", "after", "source"] or line["source"]["txId"] != 7:
                    raise AssertionError(f"body: not an event: {line}")
            elif list(line)[:len(_KEYS)] != list(_KEYS) or line["xid"] != 7 or ("subxid" in line) != streamed:
                raise AssertionError(f"body: not a change's line: {line}")
        if subxids:
            left_out, count = next(iter(subxids.items()))
            kept = [line for line in _join(run, debezium, {left_out}) if line is not None]
            if len(kept) != records - count:
                raise AssertionError(f"body: {len(kept)} lines kept of {records}, {count} left out")
        at += consumed
        if declined.__class__ is not tuple:
            break
        size = declined[2]
        if not 0 < size <= len(body) - at:
            raise AssertionError(f"body: a record of {size} bytes at {at} of {len(body)}")
        at += size
    dropped = {1, -1, 1 << 40, "x"}
    try:
        COMPILED.rows_join(body, b"", b"", dropped)
    except ValueError:
        pass
    try:
        COMPILED.rows_join_debezium(body, b"", b"", b"", dropped, {}, 0, True)
    except ValueError:
        pass


#: The Relation of ``_RELATION`` as sent outside a stream (a stream block's is the same with the xid).
_RELATION_SENT = build(_relation(None), proto_version=2)
#: The plans as the column path takes them: (capsule, slot), and ``_RELATION``'s Relation (a block may send
#: it again).
_COLUMN_PLANS = {relation_id: (plan, slot, *((_RELATION_SENT,) if relation_id == _RELATION else ()))
                 for slot, (relation_id, plan) in enumerate(_PLANS.items())}


def _fuzz_columns(body: bytes, final: bool, proto_version: int, frame: Any, every: bool, most: int,
                  lines: list[str] | None) -> None:
    outcomes: dict[int, Any] = dict.fromkeys(range(len(body))) if every else {}
    consumed, records, rows, _, buffers = COMPILED.rows_columns(body, final, _COLUMN_PLANS, proto_version, frame, 0,
                                                            outcomes, {}, 1 << 30, 1 << 30)
    if not 0 <= consumed <= most or (records and consumed == 0) or (rows and not every):
        raise AssertionError(f"columns: took {consumed} bytes ({records} records, {rows} rows), rows_run {most}")
    taken, cell_records, cell_rows, _, cells = COMPILED.rows_columns(body, final, _COLUMN_PLANS, proto_version, frame,
                                                                    0, outcomes, {}, 1 << 30, 1 << 30, True)
    if taken < consumed or cell_records < records or cell_rows < rows or taken > len(body):
        raise AssertionError(f"cells: took {taken} bytes ({cell_records} records, {cell_rows} rows) where the JSON "
                             f"images took {consumed} ({records}, {rows})")
    _column_cells(cell_rows, cells)
    _fuzz_streamed_columns(body, final, proto_version, frame, every, outcomes, consumed)
    images = _column_images(rows, buffers)
    if lines is not None and every and consumed == most:
        expected = [tuple(change.get(name) for name in ("new", "old", "key")) for change in map(json.loads, lines)]
        got = [tuple(None if text is None else json.loads(text) for text in row) for row in images]
        if got != expected:
            raise AssertionError(f"columns: row images {got} for rows_run's {expected}")


#: The facts of every streamed transaction, by key (with every transaction wanted, every offset a key).
_FACTS = (7, 1, 2, 3)


def _fuzz_streamed_columns(body: bytes, final: bool, proto_version: int, frame: Any, every: bool,
                           outcomes: dict[int, Any], plain: int) -> None:
    """The column path given the router's open streamed transactions and the streamed transactions' facts:
    it takes at least what it took without them (the same plain transactions, and stream blocks, Stream
    Commits and Stream Aborts besides), JSON images and cells alike; the open streamed transactions it keeps
    are xids to keys inside the input; a streamed row carries the facts given and a subxid, a plain one
    none."""
    facts = dict.fromkeys(outcomes, _FACTS)
    for cells in (False, True):
        streams = {705: 0}  # (a transaction open before: its Stream Commit is taken without its blocks)
        relations: list[bytes] = []
        consumed, records, rows, _, buffers = COMPILED.rows_columns(
            body, final, _COLUMN_PLANS, proto_version, frame, 0, outcomes, {}, 1 << 30, 1 << 30, cells, streams,
            facts, relations)
        if any(sent.__class__ is not bytes or sent[:1] != b"R" or sent[5:] != _RELATION_SENT[1:] for sent in relations):
            raise AssertionError(f"streamed columns: Relations taken {relations}")
        if not plain <= consumed <= len(body) or (records and consumed == 0) or (rows and not every):
            raise AssertionError(f"streamed columns: took {consumed} bytes ({records} records, {rows} rows) of "
                                 f"{len(body)}, {plain} without streams")
        if any(xid.__class__ is not int or key.__class__ is not int or not 0 <= key < max(len(body), 1)
               for xid, key in streams.items()):
            raise AssertionError(f"streamed columns: open streamed transactions {streams}")
        if cells:
            _column_cells(rows, buffers)
        else:
            _column_images(rows, buffers)
        subxids = array("q", buffers[BUFFERS.index("subxid")])
        valid = buffers[BUFFERS.index("subxid_ok")]
        xids = array("q", buffers[BUFFERS.index("xid")])
        commit_lsns = array("q", buffers[BUFFERS.index("commit_lsn")])
        if len(subxids) != rows or (valid is not None and len(valid) != (rows + 7) // 8):
            raise AssertionError(f"streamed columns: {len(subxids)} subxids, validity {valid!r} for {rows} rows")
        for i in range(rows):
            streamed = valid is None or valid[i >> 3] >> (i & 7) & 1
            if streamed and ((xids[i], commit_lsns[i]) != _FACTS[:2] or not 0 <= subxids[i] <= 0xFFFFFFFF):
                raise AssertionError(f"streamed columns: row {i} of xid {xids[i]}, subxid {subxids[i]}")
            if not streamed and subxids[i] != 0:
                raise AssertionError(f"streamed columns: a plain row {i} with subxid {subxids[i]}")


def _column_images(rows: int, buffers: tuple[Any, ...]) -> list[tuple[str | None, ...]]:
    """The new, old and key texts of each row from the column buffers, every buffer checked for its size,
    every offset in its text, every text UTF-8."""
    for at in (0, 1, 3, 4, 5, 6, 7):  # shape int32, the rest int64
        if len(buffers[at]) != rows * (4 if at == 0 else 8):
            raise AssertionError(f"columns: buffer {at} of {len(buffers[at])} bytes for {rows} rows")
    for at in (2, 8, 9, 12, 15, 18):
        if buffers[at] is not None and len(buffers[at]) != (rows + 7) // 8:
            raise AssertionError(f"columns: validity {at} of {len(buffers[at])} bytes for {rows} rows")

    def texts(valid: bytes | None, offsets: bytes, data: bytes, count: int) -> list[str | None]:
        ends = array("i", offsets)
        if len(ends) != count + 1 or ends[0] != 0 or ends[-1] != len(data):
            raise AssertionError(f"columns: offsets {list(ends)} for {count} values of {len(data)} bytes")
        out: list[str | None] = []
        for i in range(count):
            if ends[i] > ends[i + 1]:
                raise AssertionError(f"columns: offsets {list(ends)} go back")
            ok = valid is None or valid[i >> 3] >> (i & 7) & 1
            out.append(data[ends[i]:ends[i + 1]].decode() if ok else None)
        return out

    names = array("i", buffers[20])
    texts(None, buffers[20], buffers[21], len(names) - 1)
    texts(buffers[18], buffers[19], b"\0" * (len(names) - 1), rows)  # (the lists' offsets into the names)
    return list(zip(*(texts(buffers[at], buffers[at + 1], buffers[at + 2], rows) for at in (9, 12, 15))))


def _column_cells(rows: int, buffers: tuple[Any, ...]) -> None:
    """The cells of a run: each row's tuples' first cells inside the cells (or -1), the cells' kinds known,
    their offsets in order and inside their bytes, no bytes for a null or unchanged value."""
    new_at, old_at, kinds, offsets, data = (buffers[at] for at in range(22, 27))
    ends = array("i", offsets)
    count = len(kinds)
    if len(ends) != count + 1 or ends[0] != 0 or ends[-1] != len(data):
        raise AssertionError(f"cells: offsets {list(ends)[:20]} for {count} cells of {len(data)} bytes")
    for i in range(count):
        if ends[i] > ends[i + 1] or kinds[i] not in b"nutb" or (kinds[i] in b"nu" and ends[i] != ends[i + 1]):
            raise AssertionError(f"cells: cell {i} of kind {kinds[i]} at {ends[i]}:{ends[i + 1]}")
    for starts in (new_at, old_at):
        at = array("i", starts)
        if len(at) != rows or any(not -1 <= a < count for a in at):
            raise AssertionError(f"cells: {rows} rows' tuples at {list(at)[:20]} of {count} cells")


_SCRATCH: list[str] = []  # a directory for the file the first pass reads, made on first use


def _skim(flags: int, body: bytes) -> None:
    """``skim_run`` over ``body`` as given, then the compiled first pass against the Python one over it as a
    file."""
    import os
    import tempfile

    from ..io.segments import open_inputs
    from .skim import ROW_TAG_BYTES, Skimmer, take_run

    capture, version = flags & 1, 1 + (flags >> 2) % 4
    limit = len(body) - (flags >> 4) * 3  # records starting at or past the limit are not read
    status, end, records, controls, rows = COMPILED.skim_run(body, bool(flags & 2), _FRAME if capture else None,
                                                             version, ROW_TAG_BYTES, 5, max(1, limit), 7 << 48)
    if status == 0:
        if not 0 <= end <= len(body) or (records and end == 0) or len(rows) != len(controls) + 1:
            raise AssertionError(f"took {end} bytes of {len(body)}: {records} records, {len(controls)} items")
        inside = sum(1 if len(item) == 3 else item[4] for item in controls)
        if records != sum(rows) + inside:
            raise AssertionError(f"{records} records, {sum(rows)} row changes and {inside} in items")
        for item in controls:
            if len(item) != 3 and not (len(item[8][0]) == 8 * item[3] and 2 * item[3] <= item[4]):
                raise AssertionError(f"a block of {item[3]} transactions: {item[:8]}")
    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="replwire-fuzz-skim-"))
    path = os.path.join(_SCRATCH[0], "input.rwc" if capture else "input.csv")
    with open(path, "wb") as handle:
        handle.write((encode_header(CaptureHeader(proto_version=version)) if capture else b"") + body)
    try:
        (source,) = open_inputs([path], None if capture else version)
    except CaptureFileError:  # rows that start as a capture file does, and do not go on as one
        return
    unit = (16 - (flags >> 4)) * 256
    with Skimmer(source) as skimmer:
        start = source.first
        while start < source.size:
            compiled = skimmer._compiled(start, start + unit)
            try:
                expected = take_run(source, start, skimmer.skim(start, start + unit))
            except CaptureFileError:
                expected = None
            if compiled is None:
                return
            got = (compiled.stop, compiled.records, compiled.controls, compiled.rows, compiled.tail)
            if expected is None or got != (expected.stop, expected.records, expected.controls, expected.rows,
                                           expected.tail):
                raise AssertionError(f"the compiled run from {start}: {got}, the Python one: {expected}")
            if expected.stop >= source.size:
                return
            start = expected.stop
