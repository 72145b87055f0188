"""Which tables' changes to keep: ``replwire decode --table`` / ``--exclude-table``, and the Spark jobs' same
filter.

Strategy: a :class:`TableFilter` holds include and exclude globs over ``schema.table`` names and answers
:meth:`TableFilter.matches`; :func:`filter_item` applies it to what the
:class:`~replwire.codec.Assembler` gives (a committed transaction is given with only the changes of matching
tables, a TRUNCATE with only its matching relations; ``None`` when nothing of it is left).  Sans-I/O, and
nothing here parses: the relation of a change is the one the Assembler read it with.

The globs (one rule, for every caller):

* A pattern is matched against ``schema.table`` with :func:`fnmatch.fnmatchcase` wildcards (``*``, ``?``,
  ``[seq]``, ``[!seq]``), each part separately: ``public.*`` is every table of ``public``, ``*.orders``
  every ``orders``; a ``*`` never matches across the dot between schema and table.
* A pattern without a dot names a table in any schema: ``orders`` is ``*.orders``.
* Names are matched as the server stores them, case-sensitively (what ``decode`` prints): an unquoted
  ``Orders`` in SQL is ``orders``.  A part in double quotes is taken literally, wildcards and dots in it too
  (``"my.schema"."t*"``), with ``""`` for a quote inside; a pattern that does not parse is a
  :class:`ValueError`.
* pgoutput's empty namespace is ``pg_catalog``, as printed.
* A change is kept when its table matches an include pattern (or none is given) and no exclude pattern.
* Logical messages (``pg_logical_emit_message``) belong to no table: the filter keeps them.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .assembler import Change, Changes, Rendered, Transaction, relation_namespace

__all__ = ["FilteredChanges", "TableFilter", "filter_item"]


def _part(text: str, pattern: str) -> re.Pattern[str]:
    """The regular expression of one part of a pattern (schema or table): quoted pieces literally."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == '"':
            j, literal = i + 1, []
            while True:
                if j >= len(text):
                    raise ValueError(f"table pattern {pattern!r}: a quote is not closed")
                if text[j] == '"':
                    if j + 1 < len(text) and text[j + 1] == '"':
                        literal.append('"')
                        j += 2
                        continue
                    break
                literal.append(text[j])
                j += 1
            out.append(re.escape("".join(literal)))
            i = j + 1
            continue
        j = i
        while j < len(text) and text[j] != '"':
            j += 1
        # fnmatch.translate gives "(?s:...)\Z"; its inside is what the piece matches
        out.append(fnmatch.translate(text[i:j])[4:-3])
        i = j
    if not out:
        raise ValueError(f"table pattern {pattern!r}: an empty schema or table name")
    return re.compile("(?s:" + "".join(out) + r")\Z")


def _split(pattern: str) -> tuple[str, str]:
    """``pattern`` cut at its first dot outside double quotes: (schema part, table part); ``*`` for the
    schema of a pattern without one."""
    quoted = False
    for i, char in enumerate(pattern):
        if char == '"':
            quoted = not quoted
        elif char == "." and not quoted:
            return pattern[:i], pattern[i + 1:]
    return "*", pattern


class TableFilter:
    """Include and exclude globs over ``schema.table`` (see the module docstring for the rule).  ``include``
    empty: every table not excluded.  :meth:`matches` says whether a table's changes are kept."""

    def __init__(self, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> None:
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self._include = [self._compile(p) for p in self.include]
        self._exclude = [self._compile(p) for p in self.exclude]
        self._known: dict[tuple[str, str], bool] = {}

    @staticmethod
    def _compile(pattern: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
        schema, table = _split(pattern)
        return _part(schema, pattern), _part(table, pattern)

    def __bool__(self) -> bool:
        """Whether the filter leaves anything out (no patterns: it keeps everything)."""
        return bool(self.include or self.exclude)

    def __repr__(self) -> str:
        return f"TableFilter(include={list(self.include)!r}, exclude={list(self.exclude)!r})"

    def matches(self, schema: str, table: str) -> bool:
        """Whether the changes of ``schema.table`` are kept (names as stored: case-sensitive)."""
        key = (schema, table)
        known = self._known.get(key)
        if known is None:
            known = ((not self._include or any(s.match(schema) and t.match(table) for s, t in self._include))
                     and not any(s.match(schema) and t.match(table) for s, t in self._exclude))
            if len(self._known) > 65536:
                self._known.clear()
            self._known[key] = known
        return known

    def matches_relation(self, relation: Any) -> bool:
        """:meth:`matches` for a :class:`~replwire.codec.messages.Relation` (its empty namespace as
        ``pg_catalog``)."""
        return self.matches(relation_namespace(relation), relation.name)


def filter_item(item: Transaction | Change, tables: TableFilter) -> Transaction | Change | None:
    """``item`` (what the Assembler gives) with only the changes of the tables ``tables`` keeps: a change of
    another table is ``None``, a TRUNCATE keeps its matching relations (``None`` if none), a logical message
    is kept; a transaction comes with its changes filtered (:class:`FilteredChanges`), ``None`` when it had
    changes and none is kept (a transaction that had none to begin with is given as it is)."""
    if isinstance(item, Transaction):
        if not tables or not len(item.changes):
            return item
        changes = FilteredChanges(item.changes, tables)
        if not len(changes):
            return None
        import dataclasses

        return dataclasses.replace(item, changes=changes)  # type: ignore[arg-type]
    return filter_change(item, tables)


def filter_change(change: Change, tables: TableFilter) -> Change | None:
    """One :class:`~replwire.codec.Change` filtered (see :func:`filter_item`)."""
    if change.op == "message" or change.table is None and change.relations is None:
        return change
    if change.relations is not None:  # a truncate
        kept = [i for i, (schema, table) in enumerate(change.relations) if tables.matches(schema, table)]
        if not kept:
            return None
        if len(kept) == len(change.relations):
            return change
        import dataclasses

        ids = change.relation_ids
        message = change.message
        if message is not None:
            message = type(message)(xid=getattr(message, "xid", None), options=message.options,  # type: ignore
                                    relation_ids=[message.relation_ids[i] for i in kept])  # type: ignore
        return dataclasses.replace(change, relations=[change.relations[i] for i in kept],
                                   relation_ids=[ids[i] for i in kept] if ids is not None else None, message=message)
    return change if tables.matches(change.schema or "", change.table or "") else None


class FilteredChanges(Sequence[Change]):
    """The changes of a committed transaction (:class:`~replwire.codec.stream.assembler.Changes`) of the tables
    a :class:`TableFilter` keeps, read lazily as the original are; :meth:`wire` likewise.  ``len()`` takes one
    pass over the original's entries (by their relations: a change held in memory is not parsed again).  The
    changes a writer rendered itself (:class:`~replwire.codec.stream.assembler.Rendered`) are kept as they
    are: a writer renders only those of tables the filter keeps (see :mod:`replwire.codec.decode`)."""

    def __init__(self, changes: Changes, tables: TableFilter) -> None:
        self._changes, self._tables = changes, tables
        self._count: int | None = None

    def _keep(self, message: Any, schema: Any) -> Any:
        """``(message, schema)`` as kept (a truncate with its matching relations), or ``None``."""
        if schema is None or message.__class__ is Rendered:  # a logical message, or rendered changes
            return message, schema
        if isinstance(schema, tuple):  # a truncate: its Relations
            matches = self._tables.matches_relation
            kept = [i for i, relation in enumerate(schema) if matches(relation)]
            if not kept:
                return None
            if len(kept) < len(schema):
                message = type(message)(xid=getattr(message, "xid", None), options=message.options,
                                        relation_ids=[message.relation_ids[i] for i in kept])
                schema = tuple(schema[i] for i in kept)
            return message, schema
        return (message, schema) if self._tables.matches_relation(schema.relation) else None

    def wire(self) -> Iterator[tuple[Any, Any, int | None, int]]:
        """As :meth:`Changes.wire <replwire.codec.stream.assembler.Changes.wire>`, of the kept changes."""
        keep = self._keep
        for message, schema, lsn, subxid in self._changes.wire():
            kept = keep(message, schema)
            if kept is not None:
                yield kept[0], kept[1], lsn, subxid

    def __iter__(self) -> Iterator[Change]:
        tables = self._tables
        for change in self._changes:
            kept = filter_change(change, tables)
            if kept is not None:
                yield kept

    def __len__(self) -> int:
        if self._count is None:
            dropped = 0
            for message, schema, _, _ in self._changes.wire():
                if message.__class__ is not Rendered and self._keep(message, schema) is None:
                    dropped += 1
            self._count = len(self._changes) - dropped
        return self._count

    def __getitem__(self, index: Any) -> Any:
        changes = list(self)
        return changes[index]

    def __repr__(self) -> str:
        return f"<FilteredChanges: {len(self)} of {len(self._changes)}, {self._tables!r}>"

    @property
    def spilled(self) -> bool:
        """Whether the transaction was spilled to a temporary file."""
        return self._changes.spilled

    def close(self) -> None:
        """Release the spill file."""
        self._changes.close()
