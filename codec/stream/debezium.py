"""Committed changes as Debezium change events: what ``replwire decode --format debezium`` prints.

Strategy: each committed change becomes the *value* of the event Debezium's PostgreSQL connector would
send for it, in the form Kafka Connect's JSON converter writes with ``schemas.enable=false`` (the value's
``payload`` alone), so consumers written for Debezium can read replwire's output:

* ``op`` is ``c``/``u``/``d`` for a row change with ``before``/``after``, ``r`` (read) for a row of the
  initial snapshot (``source.snapshot`` ``"true"``, as the connector marks its snapshot's events), ``t``
  for a truncate (one event per truncated table, as Debezium sends them) and ``m`` for a logical message
  (``message`` holds its ``prefix`` and its ``content`` in base64, as the JSON converter writes bytes).
  ``before`` is the old row the server sent (the replica identity's key columns, or the whole row under
  ``REPLICA IDENTITY FULL``), else ``null``.
* ``source`` carries what the connector's ``source`` block carries: ``ts_ms``/``ts_us``/``ts_ns`` the
  commit time (a non-transactional message has none: the time it is processed), ``txId`` the top-level
  transaction's xid (also for a change of a streamed subtransaction), ``lsn`` the change's own LSN as an
  integer, ``sequence`` the JSON text ``["<last commit LSN>","<lsn>"]`` (the commit LSN of the transaction
  printed before, ``null`` for the first), ``schema``/``table`` (``""`` for a message), ``snapshot``
  ``"false"`` (the string the connector writes outside a snapshot; ``"true"`` for a snapshot row).
  What replwire cannot know is filled in
  plainly: ``connector`` is ``"postgresql"``, ``version`` is ``"replwire-<replwire's version>"``, ``name``
  (the connector's logical name, ``topic.prefix``) is ``"replwire"``, ``db`` is ``""`` (what the connector
  writes when it has no database name) and ``xmin`` is ``null``.
* The envelope's ``ts_ms``/``ts_us``/``ts_ns`` are the time the event is made, as the connector's are the
  time it processes the event; ``transaction`` is the block the connector adds with transaction metadata
  on: ``id`` ``"<xid>:<commit LSN>"``, ``total_order`` and ``data_collection_order`` (1-based).
* Column values are typed as ``replwire decode`` types them (:func:`~replwire.codec.stream.jsonl.json_value`),
  not in the connector's default encodings: ``numeric`` is an exact string (the connector's
  ``decimal.handling.mode=string``), dates and times ISO 8601 strings (the connector's default is epoch
  days/micros), ``bytea`` ``\\x`` hex (its default is base64), ``json``/``jsonb`` a string holding the
  server's JSON text unchanged (as the connector writes it; so JSON ``null`` is ``"null"``, SQL NULL
  ``null``), ``interval`` an ISO 8601 duration with months, days and time apart (``P1M1DT1H0.5S``; the
  connector's default is microseconds, a month taken as 30 days), ranges the server's text.
* An unchanged TOASTed value the server did not send is Debezium's placeholder
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
from .values import UNCHANGED_TOAST

__all__ = ["UNAVAILABLE_VALUE", "DebeziumEvents"]

#: What stands for a value the server did not send (Debezium's ``unavailable.value.placeholder`` default).
UNAVAILABLE_VALUE = "__debezium_unavailable_value"

_OPS = {"insert": "c", "update": "u", "delete": "d", "truncate": "t", "message": "m", "snapshot": "r"}
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 00:00:00 UTC in microseconds since 1970-01-01


def _row(values: dict[str, Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    return {name: UNAVAILABLE_VALUE if v is UNCHANGED_TOAST else json_value(v) for name, v in values.items()}


def _times(micros: int) -> dict[str, int]:
    """``ts_ms``/``ts_us``/``ts_ns`` of an instant in microseconds since 1970 (milliseconds rounded down)."""
    return {"ts_ms": micros // 1000, "ts_us": micros, "ts_ns": micros * 1000}


class DebeziumEvents:
    """Debezium change-event values (see the module docstring) of the assembler's items, in order.

    One instance per stream: it remembers the commit LSN of the last transaction it turned into events,
    which the next events' ``source.sequence`` starts with.  ``version`` is replwire's version.
    """

    def __init__(self, version: str, *, name: str = "replwire") -> None:
        self.version = f"replwire-{version}"
        self.name = name
        self._last_commit: str | None = None

    def events(self, item: Transaction | Change) -> Iterator[dict[str, Any]]:
        """The events of one assembler item: every change of a transaction, or a lone logical message."""
        if isinstance(item, Transaction):
            commit = _times(int(item.commit_time) + _PG_EPOCH_US)
            tx_id = f"{item.xid}:{int(item.commit_lsn)}"
            total = 0
            per_table: dict[tuple[str, str], int] = {}
            for change in item.changes:
                for event, table in self._change_events(change, commit):
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
                       commit: dict[str, int] | None) -> Iterator[tuple[dict[str, Any], tuple[str, str]]]:
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
        event = {"before": _row(change.old if change.old is not None else change.key), "after": _row(change.new),
                 **self._event(change, commit, op, schema, table)}
        toasted = change.unchanged_toast
        if toasted:
            event["unchanged_toast"] = toasted
        yield event, (schema, table)

    def _event(self, change: Change, commit: dict[str, int] | None, op: str, schema: str, table: str) -> dict[str, Any]:
        now = _times(time.time_ns() // 1000)
        lsn = None if change.lsn is None else int(change.lsn)
        source = {"version": self.version, "connector": "postgresql", "name": self.name,
                  **(commit if commit is not None else now), "snapshot": "true" if op == "r" else "false", "db": "",
                  "sequence": json.dumps([self._last_commit, None if lsn is None else str(lsn)],
                                         separators=(",", ":")),
                  "schema": schema, "table": table, "txId": change.xid, "lsn": lsn, "xmin": None}
        return {"source": source, "op": op, **now}
