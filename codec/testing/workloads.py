"""Generated streams: transactions a real subscriber can apply, drawn with Hypothesis from a seed.

:func:`generate` gives :data:`DDL` (two tables: ``gen_a`` with a primary key and a TOASTable ``payload``,
``gen_b`` with REPLICA IDENTITY FULL) and ``count`` transactions over them, as ``(lsn, message)`` pairs
of protocol version 4 with streaming: plain transactions, streamed ones with subtransactions some of which
are rolled back (Stream Abort of the subxid), streamed ones aborted whole, updates that leave ``payload``
unchanged (the unchanged-TOAST marker), deletes by key and by full old row, TRUNCATE, and transactional
logical messages.  It is valid by construction: Relations come before the changes that need them, a row
is updated or deleted only while it exists (rows of rolled-back subtransactions never count), values
are text the column types accept, and positions grow with commits above their changes.

Strategy: one composite strategy draws the whole stream, tracking the committed rows of each table and
the rows each open subtransaction would commit; the envelope of each logical message (prefix, content)
is drawn from the declarations' own strategy for Message (:mod:`replwire.codec.testing.strategies`).  A seed
picks the stream: the strategy runs once on the bytes of ``random.Random(seed)`` through Hypothesis'
``fuzz_one_input``, so the same seed gives the same stream.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ..messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TupleColumn,
    Update,
    WireMessage,
)
from ..scalars import LSN, Timestamp
from . import strategies

__all__ = ["DDL", "OPTIONS", "PROTO_VERSION", "RELATIONS", "Generated", "generate"]

PROTO_VERSION = 4
#: The pgoutput options the generated messages stand for.
OPTIONS = {"streaming": "on", "messages": "true"}
DDL = [
    "CREATE TABLE public.gen_a (id integer PRIMARY KEY, label text, amount numeric, payload text)",
    "CREATE TABLE public.gen_b (id bigint, note text, flag boolean)",
    "ALTER TABLE public.gen_b REPLICA IDENTITY FULL",
]
GEN_A = Relation(relation_id=16501, namespace="public", name="gen_a", replica_identity="d", columns=[
    RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1),
    RelationColumn(flags=0, name="label", type_id=25, type_modifier=-1),
    RelationColumn(flags=0, name="amount", type_id=1700, type_modifier=-1),
    RelationColumn(flags=0, name="payload", type_id=25, type_modifier=-1)])
GEN_B = Relation(relation_id=16502, namespace="public", name="gen_b", replica_identity="f", columns=[
    RelationColumn(flags=1, name="id", type_id=20, type_modifier=-1),
    RelationColumn(flags=1, name="note", type_id=25, type_modifier=-1),
    RelationColumn(flags=1, name="flag", type_id=16, type_modifier=-1)])
RELATIONS = (GEN_A, GEN_B)
_START_TIME = 820_000_000_000_000  # 2025-12-26, microseconds since 2000-01-01
_STEP = 0x40

_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\0", exclude_categories=["Cs"]), max_size=16)
_PAYLOAD = st.one_of(_TEXT, st.builds(lambda a, n: (a or "x") * n, _TEXT, st.integers(200, 800)))
_AMOUNT = st.decimals(min_value=-10**9, max_value=10**9, places=2, allow_nan=False, allow_infinity=False)
_LOGICAL_MESSAGE = strategies.messages(Message, strategies.Context("logical", PROTO_VERSION))

Row = tuple[str | None, ...]  # the text of each column, None for NULL


@dataclass(frozen=True)
class Generated:
    """A generated stream: the tables' DDL and ``(lsn, message)`` pairs in stream order."""

    ddl: list[str]
    messages: list[tuple[LSN, WireMessage]]
    proto_version: int = PROTO_VERSION
    options: dict[str, str] = dataclasses.field(default_factory=lambda: dict(OPTIONS))


def _text(values: Row) -> list[TupleColumn]:
    return [TupleColumn.null() if v is None else TupleColumn.text(v) for v in values]


class _Tables:
    """The rows of both tables (by id), committed or as an open subtransaction would leave them."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[int, Row]] = {GEN_A.relation_id: {}, GEN_B.relation_id: {}}
        self.next_id = 1

    def copy(self) -> _Tables:
        other = _Tables()
        other.rows = {relid: dict(rows) for relid, rows in self.rows.items()}
        other.next_id = self.next_id
        return other


def _change(draw: Callable[..., Any], tables: _Tables, xid: int | None) -> WireMessage:
    relation = draw(st.sampled_from(RELATIONS))
    relid = relation.relation_id
    rows = tables.rows[relid]
    choices = ["insert"] * 3 + (["update", "delete"] if rows else []) + (["truncate"] if relid == GEN_B.relation_id
                                                                      else [])
    op = draw(st.sampled_from(choices))
    if op == "truncate":
        rows.clear()
        return Truncate(xid=xid, options=0, relation_ids=[relid])
    if op == "insert":
        key = tables.next_id
        tables.next_id += 1
        row = _row(draw, relation, key)
        rows[key] = row
        return Insert(xid=xid, relation_id=relid, new=_text(row))
    key = draw(st.sampled_from(sorted(rows)))
    old = rows[key]
    if op == "delete":
        del rows[key]
        if relation is GEN_A:
            return Delete(xid=xid, relation_id=relid, key=_text((old[0], None, None, None)))
        return Delete(xid=xid, relation_id=relid, old=_text(old))
    new = _row(draw, relation, key)
    if relation is GEN_A and draw(st.booleans()):  # the payload left alone: sent as unchanged TOAST
        rows[key] = (*new[:3], old[3])
        return Update(xid=xid, relation_id=relid, new=[*_text(new[:3]), TupleColumn.unchanged_toast()])
    rows[key] = new
    if relation is GEN_A:
        return Update(xid=xid, relation_id=relid, new=_text(new))
    return Update(xid=xid, relation_id=relid, old=_text(old), new=_text(new))


def _row(draw: Callable[..., Any], relation: Relation, key: int) -> Row:
    if relation is GEN_A:
        return (str(key), draw(_TEXT), str(draw(_AMOUNT)), draw(_PAYLOAD))
    return (str(key), draw(st.one_of(st.none(), _TEXT)), draw(st.sampled_from(["t", "f"])))


def _logical_message(draw: Callable[..., Any], xid: int | None) -> WireMessage:
    drawn: Message = draw(_LOGICAL_MESSAGE)
    return dataclasses.replace(drawn, xid=xid, flags=1, lsn=LSN(0))


@st.composite
def transactions(draw: Callable[..., Any], committed: _Tables, xid: int, when: Timestamp
                 ) -> tuple[list[WireMessage], _Tables, int]:
    """One transaction after ``committed`` (the rows so far), its xid from ``xid`` on: its messages (LSNs
    still zero), the rows after it, and the last xid it used."""
    kind = draw(st.sampled_from(["plain", "plain", "streamed", "streamed aborted"]))
    working = committed.copy()
    if kind == "plain":
        body: list[WireMessage] = list(RELATIONS)
        for _ in range(draw(st.integers(1, 8))):
            body.append(_change(draw, working, None))
        if draw(st.integers(0, 4)) == 0:
            body.append(_logical_message(draw, None))
        return ([Begin(final_lsn=LSN(0), commit_time=when, xid=xid), *body,
                 Commit(flags=0, commit_lsn=LSN(0), end_lsn=LSN(0), commit_time=when)], working, xid)
    messages: list[WireMessage] = []
    subxid = xid
    for _ in range(draw(st.integers(1, 4))):  # the top level, then subtransactions in turn
        rolled_back = subxid != xid and draw(st.booleans())
        tables = working.copy() if rolled_back else working
        block: list[WireMessage] = [StreamStart(xid=xid, first_segment=int(subxid == xid))]
        if subxid == xid:
            block += [dataclasses.replace(r, xid=xid) for r in RELATIONS]
        for _ in range(draw(st.integers(1, 12))):
            block.append(_change(draw, tables, subxid))
        if draw(st.integers(0, 5)) == 0:
            block.append(_logical_message(draw, subxid))
        messages += [*block, StreamStop()]
        if rolled_back:
            messages.append(StreamAbort(xid=xid, subxid=subxid, abort_lsn=None, abort_time=None))
        subxid += 1
    if kind == "streamed aborted":
        messages.append(StreamAbort(xid=xid, subxid=xid, abort_lsn=None, abort_time=None))
        return messages, committed, subxid - 1
    messages.append(StreamCommit(xid=xid, flags=0, commit_lsn=LSN(0), end_lsn=LSN(0), commit_time=when))
    return messages, working, subxid - 1


def _placed(messages: list[WireMessage], position: int) -> tuple[list[tuple[LSN, WireMessage]], int]:
    """The messages with their positions from ``position`` on, one step apart, the commit (or the abort) at
    its end position with its commit LSN just below; and the position after them."""
    positions = [position + _STEP * i for i in range(len(messages))]
    commit_lsn = LSN(positions[-1])
    end_lsn = LSN(commit_lsn + _STEP // 2)
    out = []
    for i, message in enumerate(messages):
        if isinstance(message, Begin):
            message = dataclasses.replace(message, final_lsn=commit_lsn)
        elif isinstance(message, (Commit, StreamCommit)):
            message = dataclasses.replace(message, commit_lsn=commit_lsn, end_lsn=end_lsn)
            positions[i] = end_lsn
        elif isinstance(message, Message):
            message = dataclasses.replace(message, lsn=LSN(positions[i]))
        elif isinstance(message, StreamAbort) and message.subxid == message.xid:
            positions[i] = end_lsn
        out.append((LSN(positions[i]), message))
    return out, end_lsn + _STEP


def _draw(strategy: st.SearchStrategy[Any], entropy: random.Random) -> Any:
    """One value of ``strategy``, drawn from bytes of ``entropy`` (through Hypothesis' fuzz_one_input)."""
    drawn: list[Any] = []

    @settings(database=None, deadline=None)
    @given(strategy)
    def keep(value: Any) -> None:
        drawn.append(value)

    for _ in range(16):  # bytes the draws ran past give nothing: take new ones
        keep.hypothesis.fuzz_one_input(entropy.randbytes(8192))  # type: ignore[attr-defined]
        if drawn:
            return drawn[0]
    raise RuntimeError("could not draw a transaction")


def generate(count: int, seed: int) -> Generated:
    """``count`` transactions drawn from ``seed`` (the same seed, the same stream)."""
    entropy = random.Random(seed)
    committed = _Tables()
    out: list[tuple[LSN, WireMessage]] = []
    position, xid = 0x1000000, 1000
    for number in range(count):
        when = Timestamp(_START_TIME + number * 1_000_000)
        messages, committed, xid = _draw(transactions(committed, xid + 1, when), entropy)
        placed, position = _placed(messages, position)
        out += placed
    return Generated(list(DDL), out)
