"""Committed changes as Debezium change events: what ``replwire decode --format debezium`` prints.

Strategy: each committed change becomes the *value* of the event Debezium's PostgreSQL connector would
send for it, in the form Kafka Connect's JSON converter writes with ``schemas.enable=false`` (the value's
``payload`` alone), so consumers written for Debezium can read replwire's output:

* ``op`` is ``c``/``u``/``d`` for a row change with ``before``/``after``, ``r`` (read) for a row of the
  initial snapshot (``source.snapshot`` ``"true"``, as the connector marks its snapshot's events) or of a
  backfill (``"incremental"``, as it marks its incremental snapshots' events), ``t``
  for a truncate (one event per truncated table, as Debezium sends them) and ``m`` for a logical message
  (``message`` holds its ``prefix`` and its ``content`` in base64, as the JSON converter writes bytes).
* ``before`` is the old row as the connector builds it from what the server sent: every column of the table,
  with the old values the server sent -- under ``REPLICA IDENTITY FULL`` the whole row, under the default
  identity (or ``USING INDEX``) the key columns, the others ``null`` -- else ``null`` (an update whose key
  did not change, under the default identity: the server sends no old row).
* A delete is followed by a *tombstone* (``None``: the Kafka record with the delete's key and a null
  value, which the JSON converter writes as ``null``) unless ``tombstones=False`` (the connector's
  ``tombstones.on.delete``).
* An update that changes the row's key (the server sent the old key, and it differs from the new row's)
  is, as the connector sends it, a delete of the old key (with its tombstone) and a create of the new row;
  the Kafka headers the connector puts on them, ``__debezium.newkey`` on the delete and ``__debezium.oldkey``
  on the create (each the other key's columns), are the event's ``headers`` key (replwire's own: a line
  holds the value alone).  Under ``REPLICA IDENTITY FULL`` the server marks every column as the key, so
  the primary key is not known and such an update stays one ``u`` event.
* ``source`` carries what the connector's ``source`` block carries: ``ts_ms``/``ts_us``/``ts_ns`` the
  commit time (a non-transactional message has none: the time it is processed), ``txId`` the top-level
  transaction's xid (also for a change of a streamed subtransaction), ``lsn`` the change's own LSN as an
  integer, ``sequence`` the JSON text ``["<last commit LSN>","<lsn>"]`` (the commit LSN of the transaction
  printed before, ``null`` for the first), ``schema``/``table`` (``""`` for a message), ``snapshot``
  ``"false"`` (the string the connector writes outside a snapshot; ``"true"`` for a snapshot row), ``db``
  the database (``db``: what the capture file records; ``""`` when unknown, as the connector writes it
  without a database name).  What replwire cannot know is filled in plainly: ``connector`` is
  ``"postgresql"``, ``version`` is ``"replwire-<replwire's version>"``, ``name`` (the connector's logical
  name, ``topic.prefix``) is ``"replwire"`` and ``xmin`` is ``null``.
* The envelope's ``ts_ms``/``ts_us``/``ts_ns`` are the time the event is made, as the connector's are the
  time it processes the event; ``transaction`` is the block the connector adds with transaction metadata
  on: ``id`` ``"<xid>:<commit LSN>"``, ``total_order`` and ``data_collection_order`` (1-based; tombstones
  are not counted, having no value).
* Column values are typed as ``replwire decode`` types them (:func:`~replwire.codec.stream.jsonl.json_value`),
  not in the connector's default encodings: ``numeric`` is an exact string (the connector's
  ``decimal.handling.mode=string``), dates and times ISO 8601 strings (the connector's default is epoch
  days/micros), ``bytea`` ``\\x`` hex (its default is base64), ``json``/``jsonb`` a string holding the
  server's JSON text unchanged (as the connector writes it; so JSON ``null`` is ``"null"``, SQL NULL
  ``null``), ``interval`` an ISO 8601 duration with months, days and time apart (``P1M1DT1H0.5S``; the
  connector's default is microseconds, a month taken as 30 days), ranges the server's text.
* An unchanged TOASTed value the server did not send in the new row is taken from the old row under
  ``REPLICA IDENTITY FULL`` (the server sends the whole old row then), as the connector does; otherwise it
  is Debezium's placeholder
  ``"__debezium_unavailable_value"`` (the default of ``unavailable.value.placeholder``) in ``after``, whatever
  the column's type, and the event's ``unchanged_toast`` key (replwire's own, which Debezium consumers
  ignore) names those columns; it is present only when there are some.  NULL stays ``null``.

How the lines are written (:meth:`DebeziumEvents.lines`, what the command prints): straight from the wire
tuples of a transaction (:meth:`~replwire.codec.stream.assembler.Changes.wire`, an Assembler made with
``rows=False``), as :class:`~replwire.codec.stream.jsonl.JsonLines` writes its lines: per transaction the
``source`` block's start (commit time, ``sequence``'s first LSN), per relation its ``schema``/``table``, and
``before``/``after`` from :class:`~replwire.codec.stream.jsonl.RowJson` (the compiled row writer where in
use), the placeholder put where an unchanged TOASTed value was not sent.  The text is what ``ENCODE`` of
:meth:`DebeziumEvents.events`'s dicts gives; the rare changes whose events need the typed values -- an
update that sent its old key (a key change is split in three), an old key with values outside the key,
truncates, logical messages, snapshot rows, a relation with two columns of one name, a value the row writer
raises on (the typed path then writes it, or raises its own error) -- go through the dicts of
:meth:`~DebeziumEvents.events`, made from the typed :class:`~replwire.codec.stream.assembler.Change`.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ...schema.capture import BACKFILL_PREFIX
from ...schema.encodings import UTF8
from ..messages import Delete, Insert, TupleColumn, Update
from ..scalars import LSN
from ..wire.fast import COMPILED
from .assembler import Change, ChangeMaker, Rendered, Transaction, relation_namespace
from .jsonl import _STRING, ENCODE, RowJson, json_value, line_bytes, plan_encoding
from .value_types import UNCHANGED_TOAST
from .values import RowSchema, ValueLoader

__all__ = ["UNAVAILABLE_VALUE", "DebeziumEvents"]

#: What stands for a value the server did not send (Debezium's ``unavailable.value.placeholder`` default).
UNAVAILABLE_VALUE = "__debezium_unavailable_value"

_OPS = {"insert": "c", "update": "u", "delete": "d", "truncate": "t", "message": "m", "snapshot": "r",
        "backfill": "r"}
#: ``source.snapshot`` of a read event: ``"true"`` for a row of the initial snapshot, ``"incremental"`` for a
#: backfill's (what the connector writes for the rows of its incremental snapshots).
_SNAPSHOT_MARK = {"snapshot": "true", "backfill": "incremental"}
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 00:00:00 UTC in microseconds since 1970-01-01


def _row(values: dict[str, Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    return {name: UNAVAILABLE_VALUE if v is UNCHANGED_TOAST else json_value(v) for name, v in values.items()}


def _before(change: Change) -> dict[str, Any] | None:
    """The old row as the connector's ``before``: the old row the server sent (``REPLICA IDENTITY FULL``), or
    every column of the table with the old key's values and ``null`` for the rest, or ``None``."""
    if change.old is not None:
        return _row(change.old)
    if change.key is None:
        return None
    key = change.key
    if change.relation is None:  # (every change the decoder makes names its relation)
        return _row(key)
    return _row({c.name: key.get(c.name) for c in change.relation.columns})


def _key_change(change: Change) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The old and the new key of an update that changed its row's key, else ``None``: only where the server
    sent the old key (a ``K`` tuple); under ``REPLICA IDENTITY FULL`` every column is the key."""
    if change.op != "update" or change.key is None or change.old is not None or change.new is None:
        return None
    old, new = change.key, change.new
    if all(new.get(name) is UNCHANGED_TOAST or json_value(new.get(name)) == json_value(value)
           for name, value in old.items()):
        return None  # the key was sent, but is the same (a key column stored out of line)
    new_key = {name: old[name] if new.get(name) is UNCHANGED_TOAST else new.get(name) for name in old}
    return _row(old) or {}, _row(new_key) or {}


def _times(micros: int) -> dict[str, int]:
    """``ts_ms``/``ts_us``/``ts_ns`` of an instant in microseconds since 1970 (milliseconds rounded down)."""
    return {"ts_ms": micros // 1000, "ts_us": micros, "ts_ns": micros * 1000}


def _table_keys(schema: str, table: str) -> str:
    """The ``schema``, ``table`` and ``txId`` keys of a table's events' ``source`` block, up to the xid: also,
    through :func:`_count_key`, what ``data_collection_order`` counts the events under (one text per table)."""
    return f',"schema":{_STRING(schema)},"table":{_STRING(table)},"txId":'


def _count_key(names: str) -> str:
    """What a table's events are counted under in ``data_collection_order`` (:class:`_Order`): its
    :func:`_table_keys` as the compiled writer reads them back from the UTF-8 it writes them in
    (:func:`~replwire.codec.stream.jsonl.line_bytes`: the same text but for a SQL_ASCII name's surrogates,
    there as their JSON escapes)."""
    return line_bytes(names).decode("utf-8")


class _Order:
    """A transaction's ``transaction`` block as its events come: ``total_order`` and, per table (by
    :func:`_count_key`), ``data_collection_order`` (tombstones are not counted)."""

    __slots__ = ("per_table", "total", "tx_id")

    def __init__(self, tx_id: str) -> None:
        self.tx_id = tx_id
        self.total = 0
        self.per_table: dict[str, int] = {}

    def numbered(self, events: Iterable[tuple[dict[str, Any] | None, tuple[str, str]]]
                 ) -> Iterator[dict[str, Any] | None]:
        """``events`` (each with the table it counts under) with their ``transaction`` block."""
        per_table = self.per_table
        for event, (schema, name) in events:
            if event is not None:
                self.total += 1
                table = _count_key(_table_keys(schema, name))
                per_table[table] = per_table.get(table, 0) + 1
                event["transaction"] = {"id": self.tx_id, "total_order": self.total,
                                        "data_collection_order": per_table[table]}
            yield event


class _Relation:
    """What the lines of one relation's changes take from its :class:`RowSchema`, made once per schema: the
    ``schema``/``table`` keys of ``source``, the table's key for ``data_collection_order``, and how an old
    key becomes ``before`` (``None``: names repeat, the typed path writes its rows)."""

    __slots__ = ("counted", "keys", "names", "schema")

    def __init__(self, schema: RowSchema) -> None:
        relation = schema.relation
        self.schema = schema
        self.names = _table_keys(relation_namespace(relation), relation.name)
        self.counted = _count_key(self.names)
        columns = relation.columns
        unique = len({c.name for c in columns}) == len(columns)
        self.keys: tuple[bool, ...] | None = tuple(bool(c.flags & 1) for c in columns) if unique else None


_UNCHANGED = TupleColumn.unchanged_toast()
_PLACEHOLDER = _STRING(UNAVAILABLE_VALUE)
_EVENT_OPS = {Insert: "c", Update: "u", Delete: "d"}


class DebeziumEvents:
    """Debezium change-event values (see the module docstring) of the assembler's items, in order.

    One instance per stream: it remembers the commit LSN of the last transaction it turned into events,
    which the next events' ``source.sequence`` starts with.  ``version`` is replwire's version, ``db`` the
    database's name (``source.db``); ``tombstones`` says whether a delete is followed by a tombstone;
    ``encoding`` the client encoding of the wire tuples :meth:`lines` reads.
    """

    def __init__(self, version: str, *, name: str = "replwire", db: str = "", tombstones: bool = True,
                 encoding: str = UTF8) -> None:
        self.version = f"replwire-{version}"
        self.name = name
        self.db = db
        self.tombstones = tombstones
        self.encoding = encoding
        self._last_commit: str | None = None
        self._rows: RowJson | None = None  # (made at the first row: psycopg is needed from there)
        self._maker: ChangeMaker | None = None
        self._relations: dict[int, _Relation] = {}
        # compiled_events' answer, and what it was made of (asked for before each try of the row path)
        self._events_key: tuple[Any, ...] | None = None
        self._events: tuple[bytes, bytes, bool, int] = (b"", b"", tombstones, -1)

    def events(self, item: Transaction | Change) -> Iterator[dict[str, Any] | None]:
        """The events of one assembler item (with typed rows): every change of a transaction, or a lone
        logical message or snapshot row; a tombstone is ``None``."""
        if isinstance(item, Transaction):
            commit = _times(int(item.commit_time) + _PG_EPOCH_US)
            order = _Order(f"{item.xid}:{int(item.commit_lsn)}")
            for change in item.changes:
                yield from order.numbered(self._change_events(change, commit))
            self._last_commit = str(int(item.commit_lsn))
        else:
            for event, _ in self._change_events(item, None):
                yield event

    def compiled_events(self) -> tuple[bytes, bytes, bool, int]:
        """What the compiled row path writes the events of whole transactions with (``rows_run``'s
        ``events``): the ``source`` block's start up to the commit's ``ts_ms`` value, its middle from
        ``snapshot`` to the opening of ``sequence``'s text, whether a delete is followed by a tombstone, and
        the commit LSN of the last transaction whose events were written (-1: none).  Made again only when
        one of those changed (``version``, ``name``, ``db`` and ``tombstones`` may be set at any time)."""
        key = (self.version, self.name, self.db, self.tombstones, self._last_commit)
        if key == self._events_key:
            return self._events
        start = (f',"source":{{"version":{_STRING(self.version)},"connector":"postgresql",'
                 f'"name":{_STRING(self.name)},"ts_ms":')
        middle = f',"snapshot":"false","db":{_STRING(self.db)},"sequence":"['
        last = -1 if self._last_commit is None else int(self._last_commit)
        self._events_key, self._events = key, (line_bytes(start), line_bytes(middle), self.tombstones, last)
        return self._events

    def written_through(self, commit_lsn: int) -> None:
        """The compiled row path wrote the events of transactions up to the one committed at ``commit_lsn``:
        the next events' ``source.sequence`` starts with it."""
        self._last_commit = str(commit_lsn)

    def plan(self, schema: RowSchema) -> tuple[tuple[bytes, ...], tuple[Any, ...], int] | None:
        """What the compiled row path renders the events of ``schema``'s relation with (the arguments of
        ``rows_plan``): the ``source`` block's table keys, in the place of a JSON lines plan's line starts,
        the columns (:meth:`RowJson.plan_columns`) and what their text is in; ``None`` for a relation whose
        events the typed dicts write (two columns of one name)."""
        relation = self._relation(schema)
        if relation.keys is None:
            return None
        names = line_bytes(relation.names)  # (read back as _count_key has it)
        return (names, names, names), self._row_json().plan_columns(schema), plan_encoding(self.encoding)

    def _row_json(self) -> RowJson:
        rows = self._rows
        if rows is None:
            rows = self._rows = RowJson(ValueLoader(self.encoding))
        return rows

    def _relation(self, schema: RowSchema) -> _Relation:
        relations = self._relations
        relation = relations.get(id(schema))
        if relation is None or relation.schema is not schema:
            if len(relations) > 4096:
                relations.clear()
            relation = relations[id(schema)] = _Relation(schema)
        return relation

    def lines(self, item: Transaction | Change) -> Iterator[str | bytes]:
        """The lines of one assembler item: ``ENCODE`` of each of :meth:`events` (a tombstone is ``null``),
        written from the wire tuples of a transaction of an Assembler made with ``rows=False``; the events
        the compiled row path rendered (:class:`~replwire.codec.stream.assembler.Rendered`) as bytes: their
        lines in UTF-8, each ending in a newline."""
        if not isinstance(item, Transaction):
            for event in self.events(item):
                yield ENCODE(event)
            return
        rows = self._row_json()
        commit_us = int(item.commit_time) + _PG_EPOCH_US
        commit = _times(commit_us)
        order = _Order(f"{item.xid}:{int(item.commit_lsn)}")
        last = self._last_commit
        # the source block up to the change's LSN in "sequence" (an escaped JSON text in a JSON string)
        head = (f',"source":{{"version":{_STRING(self.version)},"connector":"postgresql","name":{_STRING(self.name)},'
                f'"ts_ms":{commit_us // 1000},"ts_us":{commit_us},"ts_ns":{commit_us * 1000},"snapshot":"false",'
                f'"db":{_STRING(self.db)},"sequence":'
                + _STRING("[" + ("null" if last is None else f'"{last}"') + ",")[:-1])
        tx_id = order.tx_id
        xid = "null" if item.xid is None else str(item.xid)
        tail = f',"transaction":{{"id":{_STRING(tx_id)},"total_order":'
        per_table = order.per_table
        tombstones, image, line = self.tombstones, self._image, self._line
        time_ns = time.time_ns
        joined: tuple[bytes, bytes, bytes] | None = None  # what rows_join_debezium puts into Rendered events
        message: Any  # (an Insert, Update or Delete where op is not None)
        for message, schema, lsn, subxid in item.changes.wire():
            if message.__class__ is Rendered:
                assert COMPILED is not None  # (only the compiled row path renders)
                if joined is None:
                    joined = (line_bytes(head), xid.encode(), line_bytes(tail))
                data, order.total = COMPILED.rows_join_debezium(message.data, *joined, message.dropped or None,
                                                                per_table, order.total, tombstones)
                yield data
                continue
            op = _EVENT_OPS.get(message.__class__)
            text: tuple[str, str, list[str]] | None = None
            relation: _Relation | None = None
            if op is not None:
                relation = self._relation(schema)
                try:
                    if op == "c" and relation.keys is not None:  # (the most common: inline)
                        toasted: list[str] = []
                        after = rows(schema, message.new, toasted=toasted)
                        if toasted:
                            after = image(rows, schema, message.new, None)
                        text = "null", after, toasted
                    else:
                        text = line(rows, op, message, relation, image)
                except Exception:  # noqa: BLE001 - a value RowJson does not take: the typed path's, or its error
                    text = None
            if text is None or relation is None:  # rare: from the typed change's dicts
                change = self._change(message, schema, lsn, item, subxid)
                for event in order.numbered(self._change_events(change, commit)):
                    yield ENCODE(event)
                continue
            before, after, toasted = text
            total = order.total = order.total + 1
            table = relation.counted
            count = per_table[table] = per_table.get(table, 0) + 1
            now = time_ns() // 1000
            if lsn is None:
                where = f'null]"{relation.names}{xid},"lsn":null'
            else:
                where = f'\\"{lsn}\\"]"{relation.names}{xid},"lsn":{lsn}'
            toast = ',"unchanged_toast":' + ENCODE(toasted) if toasted else ""
            yield (f'{{"before":{before},"after":{after}{head}{where},"xmin":null}},"op":"{op}","ts_ms":{now // 1000},'
                   f'"ts_us":{now},"ts_ns":{now * 1000}{toast}{tail}{total},"data_collection_order":{count}}}}}')
            if op == "d" and tombstones:
                yield "null"
        self._last_commit = str(int(item.commit_lsn))

    @staticmethod
    def _line(rows: RowJson, op: str, message: Any, relation: _Relation,
              image: Any) -> tuple[str, str, list[str]] | None:
        """``before``, ``after`` and the unchanged TOAST names of a row change's event, or ``None`` where
        the typed change's dicts must write it."""
        schema = relation.schema
        keys = relation.keys
        if keys is None:
            return None
        if op == "c":
            toasted: list[str] = []
            return "null", image(rows, schema, message.new, toasted), toasted
        key, old = message.key, message.old
        if op == "u":
            if key is not None:  # the old key was sent: perhaps a key change, split in three
                return None
            new = message.new
            toasted = []
            if old is None:
                return "null", image(rows, schema, new, toasted), toasted
            if any(column.kind == "u" for column in new):  # REPLICA IDENTITY FULL: the old row has it
                n = len(old)
                new = [old[i] if column.kind == "u" and i < n else column for i, column in enumerate(new)]
            return image(rows, schema, old, None), image(rows, schema, new, toasted), toasted
        if key is not None:  # a delete under the default identity: every column, the key's values
            if len(key) != len(keys) or any(column.kind != "n" for column, is_key in zip(key, keys)
                                            if not is_key):
                return None
            return image(rows, schema, key, None), "null", []
        if old is None:
            return "null", "null", []
        return image(rows, schema, old, None), "null", []

    @staticmethod
    def _image(rows: RowJson, schema: RowSchema, columns: Sequence[TupleColumn],
               toasted: list[str] | None) -> str:
        """A row image's JSON object as the events' ``before``/``after``: every column sent, an unchanged
        TOASTed one as the placeholder (its name appended to ``toasted`` unless ``None``)."""
        found: list[str] = []
        text = rows(schema, columns, toasted=found)
        if not found:
            return text
        if toasted is not None:
            toasted += found
        # the runs of sent columns between the unchanged ones, each written alone (the others as unchanged)
        count = min(len(columns), len(schema.relation.columns))
        parts: list[str] = []
        run: list[int] = []
        for i in range(count):
            if columns[i].kind == "u":
                if run:
                    parts.append(_run(rows, schema, columns, run))
                    run = []
                parts.append(f"{_STRING(schema.relation.columns[i].name)}:{_PLACEHOLDER}")
            else:
                run.append(i)
        if run:
            parts.append(_run(rows, schema, columns, run))
        return "{" + ",".join(part for part in parts if part) + "}"

    def _change(self, message: Any, schema: Any, lsn: int | None, item: Transaction, subxid: int) -> Change:
        """The typed :class:`Change` of a change of ``item`` (as the assembler makes it)."""
        maker = self._maker
        if maker is None:
            maker = self._maker = ChangeMaker(encoding=self.encoding)
        return maker.change(message, schema, LSN(lsn) if lsn is not None else None, item.xid,
                            subxid if item.streamed else None)

    def _change_events(self, change: Change,
                       commit: dict[str, int] | None) -> Iterator[tuple[dict[str, Any] | None, tuple[str, str]]]:
        """The events of one change, each with the (schema, table) it counts under for
        ``data_collection_order``; ``commit`` is the commit time's fields, ``None`` outside a transaction."""
        if change.op == "message" and change.prefix == BACKFILL_PREFIX:
            return  # (a backfill's own marker: not a change of the database's)
        op = _OPS[change.op]
        if op == "t":
            assert change.relations is not None  # a truncate change names its tables
            for schema, table in change.relations:
                yield self._event(change, commit, op, schema, table), (schema, table)
            return
        if op == "m":
            assert change.content is not None  # a message change has its content
            event = self._event(change, commit, op, "", "")
            event["message"] = {"prefix": change.prefix, "content": base64.b64encode(change.content).decode("ascii")}
            yield event, ("", "")
            return
        schema, table = change.schema or "", change.table or ""
        keys = _key_change(change) if op == "u" else None
        if keys is not None:  # the connector's primary key change: a delete, its tombstone, and a create
            old_key, new_key = keys
            delete = {"before": _before(change), "after": None, **self._event(change, commit, "d", schema, table),
                      "headers": {"__debezium.newkey": new_key}}
            yield delete, (schema, table)
            if self.tombstones:
                yield None, (schema, table)
            create = {"before": None, "after": _row(change.new), **self._event(change, commit, "c", schema, table),
                      "headers": {"__debezium.oldkey": old_key}}
            if change.unchanged_toast:
                create["unchanged_toast"] = change.unchanged_toast
            yield create, (schema, table)
            return
        new, toasted = change.new, change.unchanged_toast
        if toasted and change.old is not None and new is not None:  # REPLICA IDENTITY FULL: the old row has it
            new = {name: change.old.get(name, v) if v is UNCHANGED_TOAST else v for name, v in new.items()}
            toasted = [name for name, v in new.items() if v is UNCHANGED_TOAST]
        event = {"before": _before(change), "after": _row(new), **self._event(change, commit, op, schema, table)}
        if toasted:
            event["unchanged_toast"] = toasted
        yield event, (schema, table)
        if op == "d" and self.tombstones:
            yield None, (schema, table)

    def _event(self, change: Change, commit: dict[str, int] | None, op: str, schema: str, table: str) -> dict[str, Any]:
        now = _times(time.time_ns() // 1000)
        lsn = None if change.lsn is None else int(change.lsn)
        source = {"version": self.version, "connector": "postgresql", "name": self.name,
                  **(commit if commit is not None else now), "snapshot": _SNAPSHOT_MARK.get(change.op, "false"),
                  "db": self.db,
                  "sequence": json.dumps([self._last_commit, None if lsn is None else str(lsn)],
                                         separators=(",", ":")),
                  "schema": schema, "table": table, "txId": change.xid, "lsn": lsn, "xmin": None}
        return {"source": source, "op": op, **now}


def _run(rows: RowJson, schema: RowSchema, columns: Sequence[TupleColumn], run: list[int]) -> str:
    """The members of a row image's JSON object of the columns at the positions ``run`` alone."""
    alone = [_UNCHANGED] * len(columns)
    for i in run:
        alone[i] = columns[i]
    return rows(schema, alone)[1:-1]
