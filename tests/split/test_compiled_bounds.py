"""The compiled first pass (``skim_run``, codec/split/skim.c), column path (``rows_columns``,
codec/split/columns.c) and row path (``rows_run``, codec/decode.c) at the edges of what their callers may hand
them: a record frame whose offsets sit near the top of Py_ssize_t (once summed past the check into an
out-of-bounds read), a ``start`` that would make offsets negative or overflow, a converter that empties the
plans it was found in, a converter raising KeyboardInterrupt; and the parts that are right and must stay so:
the CRC-32 taken eight bytes a step, the validity bitmaps and list offsets of row counts that are not a
multiple of 8.

Calls that crashed the interpreter before their fix run in a child process, so that a regression fails the
test instead of ending the run."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import textwrap
import zlib
from array import array

import pytest

from replwire.codec import LSN, Begin, Commit, Insert, TupleColumn, Update, build
from replwire.codec.io.capture_file import encode_record
from replwire.codec.io.record_plan import record_frame
from replwire.codec.scalars import Timestamp
from replwire.codec.split import fuzz
from replwire.codec.split.columns import BUFFERS
from replwire.codec.wire.fast import COMPILED

pytestmark = pytest.mark.skipif(COMPILED is None, reason="the compiled codec is not built")

_TAGS = b"IUD"
_STAMP = Timestamp(800_000_000_000_000)


def _child(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run in a fresh interpreter (debug allocator: freed memory is poisoned)."""
    env = {**os.environ, "PYTHONMALLOC": "debug"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env, check=False)


def _record9(data: bytes) -> bytes:
    """A record of a 9-byte head (its data's length at 0, 4 bytes), the data, the CRC-32 of both."""
    record = struct.pack(">I", len(data)) + bytes(5) + data
    return record + struct.pack(">I", zlib.crc32(record))


#: Frames (head, lsn_at, lsn_size, len_at, len_size, crc_size) whose offsets, summed, wrap past the check.
BAD_FRAMES = [
    (9, 2**63 - 4, 8, 0, 4, 4),  # lsn_at + lsn_size wraps negative: the LSN read 2**63 bytes on
    (9, 0, 8, 2**63 - 2, 4, 4),  # len_at + len_size wraps
    (2**63 - 1, 0, 8, 8, 4, 4),  # head + crc_size wraps in capture_record
    (0, 0, 1, 0, 1, 4),  # no head at all
    (-9, 0, 1, 0, 1, 4),
]


@pytest.mark.parametrize("frame", BAD_FRAMES)
def test_a_frame_near_the_top_of_py_ssize_t_is_refused(frame):
    result = _child(f"""
        import struct, zlib
        from replwire.codec.wire.fast import COMPILED
        data = b"B" + bytes(20)
        record = struct.pack(">I", len(data)) + bytes(5) + data
        record += struct.pack(">I", zlib.crc32(record))
        for call in (lambda: COMPILED.skim_run(record, True, {frame!r}, 1, b"IUD", 0, len(record), 0),
                     lambda: COMPILED.rows_columns(record, True, {{}}, 1, {frame!r}, 0, {{}}, {{}}, 10, 10),
                     lambda: COMPILED.rows_run(record, True, {{}}, 1, -1, {frame!r}, None)):
            try:
                print("returned", call())
            except ValueError as error:
                print("refused", error)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["refused skim_run: not a record frame",
                                          "refused rows_columns: not a record frame",
                                          "refused rows_run: not a record frame"], result.stdout


def test_a_good_frame_of_another_layout_still_reads():
    records = b"".join(_record9(b"B" + bytes(20)) for _ in range(3))
    status, end, count, controls, rows = COMPILED.skim_run(records, True, (9, 1, 4, 0, 4, 4), 1, _TAGS, 0,
                                                       len(records), 0)
    assert (status, end, count, len(controls), rows) == (0, len(records), 3, 3, [0, 0, 0, 0])


@pytest.mark.parametrize("start", [-1, -(2**63), 2**63 - 1, 2**63 - 40])
def test_a_start_that_makes_offsets_negative_or_overflow_is_refused(start):
    record = encode_record(0x10, 700, b"B" + bytes(20))
    assert len(record) > 1
    with pytest.raises(ValueError, match="start out of range"):
        COMPILED.skim_run(record + record, True, record_frame(), 1, _TAGS, start, 2 * len(record), 0)


def test_the_highest_start_that_fits_reads():
    record = encode_record(0x10, 700, b"B" + bytes(20))
    data = record + record
    start = 2**63 - 1 - len(data)
    status, end, count, controls, _ = COMPILED.skim_run(data, True, record_frame(), 1, _TAGS, start, len(data), 0)
    assert (status, end, count) == (0, len(data), 2)
    assert [c[0] for c in controls] == [start, start + len(record)]


@pytest.mark.parametrize("limit", [-(2**63), -1, 0, 10**18, 2**63 - 1])
def test_any_limit_stays_inside_the_data(limit):
    record = encode_record(0x10, 700, b"B" + bytes(20))
    for final in (True, False):
        status, end, count, _, _ = COMPILED.skim_run(record * 2, final, record_frame(), 1, _TAGS, 0, limit, 0)
        if limit <= 0:
            assert (status, end, count) == (0, 0, 0)
        elif final:
            assert (status, end, count) == (0, 2 * len(record), 2)
        else:  # more wanted than given: how much at least
            assert (status, end) == (2, limit)


def test_the_crc_eight_bytes_a_step_is_zlibs_at_every_length_and_alignment():
    chance = random.Random(7)
    frame = record_frame()
    for size in range(1, 80):
        data = b"B" + bytes(chance.getrandbits(8) for _ in range(size - 1))
        record = encode_record(0x10, 700, data)
        for pad in range(8):  # the record at every alignment in the buffer
            body = bytes(pad) + record
            status, _, count, _, _ = COMPILED.skim_run(memoryview(body)[pad:], True, frame, 1, _TAGS, 0, len(record),
                                                   0)
            assert (status, count) == (0, 1), (size, pad)
        spot = chance.randrange(len(record) - 4)
        if spot < frame[0] and frame[3] <= spot < frame[3] + frame[4]:
            continue  # (a flipped length is torn, not corrupt)
        flipped = bytearray(record)
        flipped[spot] ^= 1 << chance.randrange(8)
        status, *_ = COMPILED.skim_run(bytes(flipped), True, frame, 1, _TAGS, 0, len(record), 0)
        assert status == 1, (size, spot)  # fails its checksum: declined to the Python reader


def _csv(messages) -> bytes:
    return b"".join(f"{LSN(0x1000 + i)},700,\\x{build(m, proto_version=1).hex()}\n".encode()
                    for i, m in enumerate(messages))


def _transaction(rows: int, toast_every: int = 3) -> list:
    changes = []
    for i in range(rows):
        if i % toast_every == 1:
            new = [TupleColumn.text(str(i)), TupleColumn.unchanged_toast(), *(TupleColumn.text(v)
                                                                              for v in fuzz._VALUES[2:])]
            changes.append(Update(relation_id=fuzz._RELATION, key=None, new=new))
        else:
            changes.append(Insert(relation_id=fuzz._RELATION,
                                  new=[TupleColumn.text(str(i)), *(TupleColumn.text(v) for v in fuzz._VALUES[1:])]))
    return [Begin(final_lsn=LSN(0x1000), commit_time=_STAMP, xid=700), *changes,
            Commit(flags=0, commit_lsn=LSN(0x1000), end_lsn=LSN(0x1010), commit_time=_STAMP)]


@pytest.mark.parametrize("rows", [1, 3, 7, 8, 9, 17])
def test_bitmaps_and_list_offsets_for_any_row_count(rows):
    body = _csv(_transaction(rows))
    consumed, records, got, declined, buffers = COMPILED.rows_columns(body, True, fuzz._COLUMN_PLANS, 1, None, 0,
                                                                  {0: None}, {}, 1 << 30, 1 << 30)
    assert (consumed, records, got, declined) == (len(body), rows + 2, rows, 0)
    images = fuzz._column_images(rows, buffers)  # every buffer's size, every offset checked
    assert [json.loads(new)["id"] for new, _, _ in images] == list(range(rows))
    old_valid = buffers[12]
    assert old_valid == bytes((rows + 7) // 8)  # no old images: every bit clear, the padding too
    toasted = [i for i in range(rows) if i % 3 == 1]
    assert list(array("i", buffers[19])) == [0] + [sum(1 for t in toasted if t <= i) for i in range(rows)]
    assert buffers[21] == b"name" * len(toasted)


def _plan_of(call):
    starts = (b"", b"", b"")
    return COMPILED.rows_plan(starts, ((b'"id":', 4, True, call, "id"), (b'"v":', 4, False, call, "v")))


def _two_columns(rows: int) -> bytes:
    changes = [Insert(relation_id=1, new=[TupleColumn.text(str(i)), TupleColumn.text("x")]) for i in range(rows)]
    return _csv([Begin(final_lsn=LSN(0x1000), commit_time=_STAMP, xid=700), *changes,
                 Commit(flags=0, commit_lsn=LSN(0x1000), end_lsn=LSN(0x1010), commit_time=_STAMP)])


def test_a_converter_raising_keyboard_interrupt_propagates():
    def call(data):
        raise KeyboardInterrupt

    body = _two_columns(2)
    with pytest.raises(KeyboardInterrupt):
        COMPILED.rows_columns(body, True, {1: (_plan_of(call), 0)}, 1, None, 0, {0: None}, {}, 1 << 30, 1 << 30)


#: Each row writer called with plans a converter empties: (how plans hold a plan, inserts in the transaction,
#: the call, what it prints).  rows_run and rows_body look each change's plan up again (the second finds none:
#: declined), rows_columns keeps the one it found for the next change of the same relation.
_EMPTIED_PLANS = {
    "rows_columns": ("(COMPILED.rows_plan((b'', b'', b''), columns), 0)", 3,
                     "COMPILED.rows_columns(body, True, plans, 1, None, 0, {0: None}, {}, 1 << 30, 1 << 30)",
                     "print(result[0] == len(body), *result[1:4])", ["True", "5", "3", "0"]),
    "rows_run": ("COMPILED.rows_plan((b'{', b'{', b'{'), columns)", 1,
                 "COMPILED.rows_run(body, True, plans, 1, -1, None, None)",
                 "print(result[0] == len(body), result[1].count(b'\\n'), result[4])", ["True", "1", "1"]),
    "rows_run, Debezium's events": ("COMPILED.rows_plan((b'', b'', b''), columns)", 1,
                                    "COMPILED.rows_run(body, True, plans, 1, -1, None, (b'', b'', True, -1))",
                                    "print(result[0] == len(body), result[1].count(b'\\n'), result[4])",
                                    ["True", "1", "1"]),
    "rows_body": ("COMPILED.rows_plan((b'{', b'{', b'{'), columns)", 2,
                  "COMPILED.rows_body(body[body.index(b'\\n') + 1:], True, plans, 1, False, None, False)",
                  "print(result[2], type(result[4]).__name__)", ["1", "tuple"]),
    "rows_body, Debezium's events": ("COMPILED.rows_plan((b'', b'', b''), columns)", 2,
                                     "COMPILED.rows_body(body[body.index(b'\\n') + 1:], True, plans, 1, False, "
                                     "None, True)", "print(result[2], type(result[4]).__name__)", ["1", "tuple"]),
}


@pytest.mark.parametrize("writer", sorted(_EMPTIED_PLANS))
def test_a_converter_that_empties_the_plans_leaves_its_plan_alive(writer):
    """The plan found in ``plans`` is used while converters run: held, not borrowed (before, the capsule and
    its plan were freed under the row writer -- use after free, a crash with the debug allocator)."""
    entry, inserts, call, show, expected = _EMPTIED_PLANS[writer]
    result = _child(f"""
        import json
        from replwire.codec import LSN, Begin, Commit, Insert, TupleColumn, build
        from replwire.codec.scalars import Timestamp
        from replwire.codec.wire.fast import COMPILED
        plans = {{}}
        def call(data):
            plans.clear()
            return json.dumps(data.decode())
        columns = tuple((f'"{{n}}":'.encode(), 4, n == "c0", call, n) for n in [f"c{{i}}" for i in range(40)])
        plans[1] = {entry}
        stamp = Timestamp(0)
        messages = [Begin(final_lsn=LSN(1), commit_time=stamp, xid=7),
                    *[Insert(relation_id=1, new=[TupleColumn.text(str(i)) for i in range(40)])] * {inserts},
                    Commit(flags=0, commit_lsn=LSN(1), end_lsn=LSN(2), commit_time=stamp)]
        body = b"".join(f"{{LSN(1 + i)}},7,\\\\x{{build(m, proto_version=1).hex()}}\\n".encode()
                        for i, m in enumerate(messages))
        result = {call}
        {show}
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == expected


def test_dropped_subtransactions_that_change_while_asked_are_read_safely():
    dropped = {}

    class Shrinking:
        def __contains__(self, xid):
            dropped.clear()  # the only reference to this object goes
            return xid == 700

    dropped[0] = Shrinking()
    body = _two_columns(2)
    plans = {1: (_plan_of(lambda data: json.dumps(data.decode())), 0)}
    consumed, records, rows, declined, _ = COMPILED.rows_columns(body, True, plans, 1, None, 0, {0: None}, dropped,
                                                             1 << 30, 1 << 30)
    assert (consumed, records, rows, declined) == (len(body), 4, 0, 0)  # its xid dropped: no rows


@pytest.mark.parametrize("length", [12, 4094, 4096, 4200])
def test_the_fuzz_targets_runs_agree_at_a_torn_csv_line_after_a_run(length):
    """The fuzz target's comparison of the compiled runs with the Python ones (runs of 4096 bytes: bits 4-7 of
    the flags clear), over COPY-CSV rows whose last line is cut short, inside the first run or right where it
    ends (the first line 4096 bytes or longer): the run before the torn line is the same on both sides (the
    Python reading reads the torn line to find where that run ends, and leaves its error to the next run),
    and the torn line's own run is declined."""
    row = b"0/10,0,\\x49" + b"00" * ((length - 12) // 2) + b"\n"  # an Insert's tag byte: a line of length bytes
    for body in (row + b"0/1", row + b"0/11,0,\\x4", row + b"0/11,0,\\x", row * 3 + b"0/11,0"):
        for flags in (0x0C, 0x0E):  # COPY-CSV rows, protocol 4, ending the input or not
            fuzz._skim(flags, body)


def _block(first: int = 1) -> bytes:
    """A stream block of one insert of fuzz's relation by a subtransaction (protocol 2), as COPY-CSV rows;
    its key is 0 (its Stream Start's offset) where it opens its transaction."""
    from replwire.codec import StreamStart, StreamStop

    new = [TupleColumn.text("1"), *(TupleColumn.text(v) for v in fuzz._VALUES[1:])]
    messages = [(StreamStart(xid=705, first_segment=first), False),
                (Insert(xid=706, relation_id=fuzz._RELATION, new=new), True), (StreamStop(), True)]
    return b"".join(f"{LSN(0x1000 + i)},705,\\x{build(m, proto_version=2, in_stream=s).hex()}\n".encode()
                    for i, (m, s) in enumerate(messages))


def _columns_of(body, streams, facts, dropped=None):
    return COMPILED.rows_columns(body, True, fuzz._COLUMN_PLANS, 2, None, 0, {0: None}, dropped or {}, 1 << 30,
                                 1 << 30, False, streams, facts)


def test_a_stream_block_of_a_transaction_in_outcomes_with_facts_the_c_takes():
    body, streams = _block(), {}
    consumed, records, rows, declined, buffers = _columns_of(body, streams, {0: (705, 0x2000, 0x2010, 0)})
    assert (consumed, records, rows, declined, streams) == (len(body), 3, 1, 0, {705: 0})
    at = {name: BUFFERS.index(name) for name in ("xid", "subxid", "subxid_ok", "commit_lsn", "end_lsn")}
    assert [array("q", buffers[at[name]])[0] for name in ("xid", "subxid", "commit_lsn", "end_lsn")] == [
        705, 706, 0x2000, 0x2010]
    assert buffers[at["subxid_ok"]] is None  # (every row valid)
    assert _columns_of(body, {}, {0: (705, 0x2000, 0x2010, 0)}, {0: frozenset({706})})[2] == 0  # rolled back


@pytest.mark.parametrize("facts", [{}, {0: (705, 1 << 63, 0, 0)}, {0: (-1, 0, 0, 0)}, {0: (705, 0, 0, 1 << 63)}])
def test_a_stream_block_without_facts_it_can_write_is_declined(facts):
    """No facts for a transaction in outcomes (an origin, two-phase), or facts no int64 column holds: the
    block is the Python path's, and the open streamed transactions stay as they were."""
    streams = {1: 2}
    assert _columns_of(_block(), streams, facts)[:4] == (0, 0, 0, 1) and streams == {1: 2}


@pytest.mark.parametrize("streams, facts, error", [
    ({705: "k"}, {}, TypeError),  # a key that is no int: the router's dict is not what it holds
    ({}, {0: (705, 0, 0)}, ValueError),  # facts of the wrong shape
    ({}, {0: None}, ValueError),
])
def test_bad_streams_or_facts_are_errors_not_crashes(streams, facts, error):
    with pytest.raises(error):
        _columns_of(_block(first=0), streams, facts)
