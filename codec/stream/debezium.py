"""Committed changes as Debezium change events: what ``replwire decode --format debezium`` prints.

Strategy: each committed change becomes the *value* of the event Debezium's PostgreSQL connector would
send for it, in the form Kafka Connect's JSON converter writes with ``schemas.enable=false`` (the value's
``payload`` alone), so consumers written for Debezium can read replwire's output:

* ``op`` is ``c``/``u``/``d`` for a row change with ``before``/``after``, ``r`` (read) for a row of the
  initial snapshot (``source.snapshot`` ``"true"``, as the connector marks its snapshot's events), ``t``
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
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

from .assembler import Change, Transaction
from .jsonl import json_value
from .value_types import UNCHANGED_TOAST

__all__ = ["UNAVAILABLE_VALUE", "DebeziumEvents"]

#: What stands for a value the server did not send (Debezium's ``unavailable.value.placeholder`` default).
UNAVAILABLE_VALUE = "__debezium_unavailable_value"

_OPS = {"insert": "c", "update": "u", "delete": "d", "truncate": "t", "message": "m", "snapshot": "r"}
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


class DebeziumEvents:
    """Debezium change-event values (see the module docstring) of the assembler's items, in order.

    One instance per stream: it remembers the commit LSN of the last transaction it turned into events,
    which the next events' ``source.sequence`` starts with.  ``version`` is replwire's version, ``db`` the
    database's name (``source.db``); ``tombstones`` says whether a delete is followed by a tombstone.
    """

    def __init__(self, version: str, *, name: str = "replwire", db: str = "", tombstones: bool = True) -> None:
        self.version = f"replwire-{version}"
        self.name = name
        self.db = db
        self.tombstones = tombstones
        self._last_commit: str | None = None

    def events(self, item: Transaction | Change) -> Iterator[dict[str, Any] | None]:
        """The events of one assembler item: every change of a transaction, or a lone logical message; a
        tombstone is ``None``."""
        if isinstance(item, Transaction):
            commit = _times(int(item.commit_time) + _PG_EPOCH_US)
            tx_id = f"{item.xid}:{int(item.commit_lsn)}"
            total = 0
            per_table: dict[tuple[str, str], int] = {}
            for change in item.changes:
                for event, table in self._change_events(change, commit):
                    if event is not None:
                        total += 1
                        per_table[table] = per_table.get(table, 0) + 1
                        event["transaction"] = {"id": tx_id, "total_order": total,
                                                "data_collection_order": per_table[table]}
                    yield event
            self._last_commit = str(int(item.commit_lsn))
        else:
            for event, _ in self._change_events(item, None):
                yield event

    def _change_events(self, change: Change,
                       commit: dict[str, int] | None) -> Iterator[tuple[dict[str, Any] | None, tuple[str, str]]]:
        """The events of one change, each with the (schema, table) it counts under for
        ``data_collection_order``; ``commit`` is the commit time's fields, ``None`` outside a transaction."""
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
                  **(commit if commit is not None else now), "snapshot": "true" if op == "r" else "false",
                  "db": self.db,
                  "sequence": json.dumps([self._last_commit, None if lsn is None else str(lsn)],
                                         separators=(",", ":")),
                  "schema": schema, "table": table, "txId": change.xid, "lsn": lsn, "xmin": None}
        return {"source": source, "op": op, **now}
