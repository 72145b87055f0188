"""Committed changes as JSON objects: what ``replwire decode`` prints, one per line.

Strategy: one object per change of a committed transaction (and per non-transactional logical message),
with the keys the command line promises: ``op``, ``schema``, ``table``, ``xid``, ``lsn``, ``commit_lsn``,
``commit_time``, ``new``/``old``/``key`` and ``unchanged_toast``.  ``xid`` is the top-level transaction's xid,
whichever subtransaction made the change; a change of a streamed transaction also has ``subxid``, the xid of
the (sub)transaction that made it as the server sent it (the top-level xid for the transaction's own changes),
and a two-phase transaction's changes have ``gid``.  Values become typed JSON without losing
anything: integers as numbers, ``numeric`` as exact strings, booleans, timestamps and dates in ISO 8601
(``"infinity"`` where the server has it), ``bytea`` as ``\\x`` hex, arrays as lists, ``json``/``jsonb`` as
JSON, everything else as text.  An unchanged TOASTed column is left out of ``new`` and named in
``unchanged_toast`` -- never written as null.
"""

from __future__ import annotations

import datetime as dt
import decimal
import ipaddress
import json
import math
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from .assembler import Change, Transaction
from .values import UNCHANGED_TOAST, Infinite, RawValue, RowSchema, ValueLoader


def json_value(value: Any) -> Any:
    """A typed value as a JSON-ready value (see the module docstring)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, decimal.Decimal):
        return str(value) if value.is_finite() else {"NaN": "NaN", "Infinity": "Infinity",
                                                       "-Infinity": "-Infinity"}.get(str(value), str(value))
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Infinite):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, RawValue):
        return str(value)
    if isinstance(value, (uuid.UUID, ipaddress.IPv4Address, ipaddress.IPv6Address, ipaddress.IPv4Network,
                          ipaddress.IPv6Network, ipaddress.IPv4Interface, ipaddress.IPv6Interface)):
        return str(value)
    if isinstance(value, dt.timedelta):
        return _duration(value)
    if hasattr(value, "obj") and type(value).__name__ in ("Json", "Jsonb"):  # psycopg wrappers
        return value.obj
    return str(value)


def _duration(value: dt.timedelta) -> str:
    """ISO 8601 duration of a ``timedelta`` (days and seconds, as psycopg loads an interval)."""
    sign = "-" if value < dt.timedelta(0) else ""
    value = abs(value)
    seconds = value.seconds + value.microseconds / 1_000_000
    text = f"{seconds:.6f}".rstrip("0").rstrip(".")
    return f"{sign}P{value.days}DT{text}S"


def _row(values: dict[str, Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    # str, int and None (most values) are their own JSON value: skip the call
    return {name: json_value(v) for name, v in values.items() if v is not UNCHANGED_TOAST}


#: How a JSON object of typed values is written: compact, UTF-8 kept (what ``RowJson`` reproduces).
ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_STRING = json.encoder.encode_basestring  # what ENCODE writes a str with (ensure_ascii=False)

# Text-format ('t') columns RowJson writes without the typed value, by the OID their type resolves to: as a
# JSON string of the text (text types, and types kept as text), or as the integer.
_STRING_OIDS = frozenset((25, 1043, 1042, 19, None))  # text, varchar, bpchar, name; None: kept as text
_INTEGER_OIDS = frozenset((20, 21, 23))  # int8, int2, int4


class RowJson:
    """A tuple as JSON text straight from its wire columns: the same text as ``ENCODE`` of the typed row
    (:meth:`ValueLoader.load_row` then :func:`json_value`, unchanged TOAST left out), without the dict.

    Strategy: per :class:`RowSchema` (and key-only or not) a small function is written and compiled, one
    branch per column, each with the column's name already written as a JSON key; text, varchar, bpchar,
    name and integer columns in text format skip the typed value (the text is the value: a JSON string, or
    the integer); every other column goes through the typed value.
    """

    def __init__(self, loader: ValueLoader | None = None) -> None:
        self.loader = loader or ValueLoader()
        self._writers: dict[tuple[int, bool], tuple[RowSchema, Callable[..., str]]] = {}

    def __call__(self, schema: RowSchema, columns: Sequence[Any], *, only_keys: bool = False,
                 toasted: list[str] | None = None) -> str:
        """The JSON object of ``columns`` (a tuple's wire columns); ``only_keys`` keeps the key columns.
        The names of the columns whose unchanged TOASTed value was not sent are appended to ``toasted``."""
        cached = self._writers.get((id(schema), only_keys))
        if cached is None or cached[0] is not schema:
            if len(self._writers) > 4096:
                self._writers.clear()
            cached = self._writers[(id(schema), only_keys)] = (schema, self._writer(schema, only_keys))
        return cached[1](columns, toasted)

    def _writer(self, schema: RowSchema, only_keys: bool) -> Callable[..., str]:
        loader = self.loader
        lines = ["def write(columns, toasted):", "    parts = []", "    append = parts.append", "    n = len(columns)"]
        for i, (meta, type_message) in enumerate(zip(schema.relation.columns, schema.types)):
            if only_keys and not meta.flags & 1:
                continue
            oid = loader.resolve(meta.type_id, type_message)
            key = _STRING(meta.name) + ":"
            lines += [f"    if n > {i}:",
                      f"        column = columns[{i}]",
                      "        kind = column.kind",
                      f"        if kind == 'n': append({key + 'null'!r})"]
            if oid in _STRING_OIDS:
                decode = f"column.data.decode({loader.encoding!r})"
                lines.append(f"        elif kind == 't': append({key!r} + _string({decode}))")
            elif oid in _INTEGER_OIDS:
                lines.append(f"        elif kind == 't': append({key!r} + str(int(column.data)))")
            lines += ["        elif kind == 'u':",
                      f"            if toasted is not None: toasted.append({meta.name!r})",
                      f"        else: append({key!r} + _typed(kind, column.data, {i}))"]
        lines.append("    return '{' + ','.join(parts) + '}'")
        types = [(meta.type_id, type_message) for meta, type_message in zip(schema.relation.columns, schema.types)]

        def typed(kind: str, data: bytes, i: int) -> str:
            return ENCODE(json_value(loader.load(kind, data, *types[i])))

        namespace: dict[str, Any] = {"_string": _STRING, "_typed": typed}
        exec(compile("\n".join(lines), "<replwire.codec.stream.jsonl: row writer>", "exec"), namespace)  # noqa: S102
        return namespace["write"]


def change_object(change: Change, transaction: Transaction | None) -> dict[str, Any]:
    """One change as the JSON object ``replwire decode`` prints."""
    if transaction is None:
        return _change_object(change, None)
    return _change_object(change, _transaction_fields(transaction), transaction.streamed)


def _transaction_fields(transaction: Transaction) -> dict[str, Any]:
    """The keys every change of ``transaction`` shares (made once per transaction, not once per change)."""
    out: dict[str, Any] = {"xid": transaction.xid, "commit_lsn": str(transaction.commit_lsn),
                           "commit_time": json_value(_commit_datetime(transaction))}
    if transaction.origin is not None:
        out["origin"] = transaction.origin[0]
    if transaction.gid is not None:
        out["gid"] = transaction.gid
    return out


def _change_object(change: Change, shared: dict[str, Any] | None, streamed: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"op": change.op, "schema": change.schema, "table": change.table, "xid": None,
                           "lsn": str(change.lsn) if change.lsn is not None else None}
    if shared is not None:
        out.update(shared)
    if streamed:
        out["subxid"] = change.subxid
    if change.op == "truncate":
        assert change.relations is not None  # a truncate change names its tables
        out["relations"] = [f"{schema}.{table}" for schema, table in change.relations]
        out["cascade"], out["restart_identity"] = change.cascade, change.restart_identity
    elif change.op == "message":
        assert change.content is not None  # a message change has its content
        out["prefix"] = change.prefix
        out["content"] = "\\x" + change.content.hex()
        out["transactional"] = change.transactional
        try:
            out["content_text"] = change.content.decode("utf-8")
        except UnicodeDecodeError:
            pass
    else:
        for name in ("new", "old", "key"):
            row = _row(getattr(change, name))
            if row is not None:
                out[name] = row
        toasted = [name for name, v in (change.new or {}).items() if v is UNCHANGED_TOAST]
        if toasted:
            out["unchanged_toast"] = toasted
    return out


def _commit_datetime(transaction: Transaction) -> Any:
    try:
        return transaction.commit_time.to_datetime()
    except ValueError:
        return int(transaction.commit_time)


def objects(item: Transaction | Change):
    """The JSON objects of one assembler item: every change of a transaction, or a lone message."""
    if isinstance(item, Transaction):
        shared = _transaction_fields(item)
        for change in item.changes:
            yield _change_object(change, shared, item.streamed)
    else:
        yield _change_object(item, None)


__all__ = ["ENCODE", "RowJson", "change_object", "json_value", "objects"]
