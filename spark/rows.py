"""Decoded changes as Arrow record batches: the change table of every table, and one typed table per table.

Strategy: rows are gathered column by column in plain lists and handed to Arrow a batch at a time
(``pa.RecordBatch.from_arrays``), so a change crosses into Spark as a few values in Arrow buffers, never as
a Python object per row.  The Spark schemas here are the contract of ``spark.read.format("replwire")``:

* :data:`CHANGES` -- one row per committed change of any table (and per logical message): the change's
  ``op``, ``schema``, ``table``, transaction facts (``xid`` is the top-level transaction's; ``subxid``,
  for a streamed transaction, the xid of the subtransaction that made the change; ``gid`` a two-phase
  transaction's), stream ``position``, and the row images ``new``, ``old`` and ``key`` as JSON objects
  exactly as ``replwire decode`` writes them (typed, exact), with ``unchanged_toast`` naming the columns
  whose value was not sent.
* :func:`table_schema` -- one row per change of one table in one shape (:class:`RelationVersion`): the
  same facts (:data:`META`: ``xid``, ``subxid`` and ``gid`` as above), then the table's own columns, typed
  (:mod:`replwire.spark.types`), holding the new row (the deleted row's key or old image for a delete),
  ``_before`` (a struct of the same columns: the old key or old row the server sent with an update or
  delete), ``_before_unchanged_toast`` (the columns of
  ``_before`` whose unchanged TOASTed value was not sent), ``_unchanged_toast`` (the same for the row: null
  there means "keep what you have", never SQL NULL) and ``_unrepresentable``.

  These meta and trailing columns are named by :func:`meta_names`: a table may have columns of its own
  called ``op``, ``position`` or ``_before``, so each of them takes leading underscores until its name
  differs from every column of the table, ignoring case as Spark does (``_op``, ``__before``,
  ``___unchanged_toast`` when ``op``, ``_before``, ``_unchanged_toast`` and ``__unchanged_toast`` are
  taken; ``_position`` beside a ``Position``).  The names depend only on the
  table's column names, and are the ones above for a table that has none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from replwire.codec.messages import Delete, Insert
from replwire.codec.split import Decoded, Part, RelationVersion
from replwire.codec.split.columns import BUFFERS, ColumnRun, part_changes
from replwire.codec.stream.assembler import Change
from replwire.codec.stream.jsonl import RowJson
from replwire.codec.stream.outcome import Outcome
from replwire.codec.stream.values import ValueLoader

from .types import ColumnType, Unrepresentable, column_type

__all__ = ["CHANGES", "ChangeRows", "TableRows", "change_batches", "meta_names", "table_batches", "table_runs",
           "table_schema"]

#: Meta columns of the per-table change rows, before the table's own columns.
META = [("op", T.StringType(), pa.string()), ("schema", T.StringType(), pa.string()),
        ("table", T.StringType(), pa.string()), ("xid", T.LongType(), pa.int64()),
        ("subxid", T.LongType(), pa.int64()), ("lsn", T.LongType(), pa.int64()),
        ("commit_lsn", T.LongType(), pa.int64()),
        ("commit_time", T.TimestampType(), pa.timestamp("us", tz="UTC")), ("position", T.LongType(), pa.int64()),
        ("gid", T.StringType(), pa.string())]

_CHANGE_COLUMNS = [
    *META[:7],
    ("end_lsn", T.LongType(), pa.int64()),
    *META[7:9],
    ("relation_id", T.LongType(), pa.int64()),
    ("new", T.StringType(), pa.string()), ("old", T.StringType(), pa.string()),
    ("key", T.StringType(), pa.string()),
    ("unchanged_toast", T.ArrayType(T.StringType(), False), pa.list_(pa.field("element", pa.string(), False))),
    ("truncated", T.ArrayType(T.StringType(), False), pa.list_(pa.field("element", pa.string(), False))),
    ("cascade", T.BooleanType(), pa.bool_()), ("restart_identity", T.BooleanType(), pa.bool_()),
    ("prefix", T.StringType(), pa.string()), ("content", T.BinaryType(), pa.binary()),
    ("transactional", T.BooleanType(), pa.bool_()),
    ("origin", T.StringType(), pa.string()), META[9],
    ("streamed", T.BooleanType(), pa.bool_()),
]
#: The columns after the table's own in the per-table change rows, by their default names.
EXTRA = ("_before", "_before_unchanged_toast", "_unchanged_toast", "_unrepresentable")

#: The Spark schema of the change DataFrame (every table).
CHANGES = T.StructType([T.StructField(n, t, True) for n, t, _ in _CHANGE_COLUMNS])
_CHANGES_ARROW = pa.schema([pa.field(n, a, True) for n, _, a in _CHANGE_COLUMNS])
_UNREPRESENTABLE = pa.map_(pa.string(), pa.field("value", pa.string(), False))


def _time(outcome: Outcome) -> Any:
    try:
        return outcome.commit_time.to_datetime()
    except (ValueError, OverflowError):
        return None


_OPS = frozenset(("insert", "update", "delete", "snapshot", "backfill"))
#: A transaction's facts in the rows: xid, commit_lsn, end_lsn, commit_time, origin name, gid, streamed.
_Facts = tuple[int | None, int | None, int | None, Any, str | None, str | None, bool | None]
_NO_TRANSACTION: _Facts = (None,) * 7


def _facts(outcome: Outcome) -> _Facts:
    return (outcome.xid, int(outcome.commit_lsn), int(outcome.end_lsn), _time(outcome),
            outcome.origin[0] if outcome.origin else None, outcome.gid, outcome.streamed)


#: the kinds of a tuple's column, as bytes: null, unchanged TOAST, text, binary
_N, _U, _T, _B = b"nutb"
#: The most bytes of runs' cells a :class:`TableRows` keeps untyped: a run's buffers hold every table's
#: cells, and a table with few rows in each run would keep them all until it has a batch of rows.
_PENDING_BYTES = 32 << 20
#: a tuple's columns (``column(i)``: the rows' kinds, null for a row without the tuple, and bytes of column
#: ``i``), which rows have one, and the kinds its cells have (``None``: not known)
_Tuples = tuple[Callable[[int], tuple[pa.Array, pa.Array]], pa.Array, "set[int] | None"]
_NONE = object()  # no outcome seen yet (None is a lone logical message's)


class ChangeRows:
    """Collects :class:`~replwire.codec.split.Decoded` changes into :data:`CHANGES` batches.

    Feed it the changes of ``decode_part(..., rows=False)`` (or of an Assembler): the row images are written
    as JSON straight from the wire tuples of ``change.message`` (:class:`~replwire.codec.stream.jsonl.RowJson`,
    with ``change.row_schema``), the same text ``replwire decode`` prints.

    Strategy: only what differs from change to change is kept per row, each in a list of its own (the
    change's shape, its transaction, ``subxid``, ``lsn``, ``position``, the three row images and
    ``unchanged_toast``).
    ``op``, ``schema``, ``table`` and ``relation_id`` are kept once per shape (table and operation) and the
    transaction's facts once per transaction, each as a small Arrow array that the rows' indices ``take``
    from; the columns only a truncate or a logical message fills are all null but for those few rows.  So a
    batch's columns are built by Arrow from a few lists, not from a Python value per row and column.
    """

    def __init__(self, loader: ValueLoader | None = None) -> None:
        self.json = RowJson(loader)
        #: shape index, transaction index, subxid, lsn, position, new, old, key, unchanged_toast
        self._columns: list[list[Any]] = [[] for _ in range(9)]
        self._append = tuple(column.append for column in self._columns)
        #: row index -> (truncated, cascade, restart_identity, prefix, content, transactional): truncates and
        #: logical messages, the only rows with values in those columns
        self._rare: dict[int, tuple[Any, ...]] = {}
        self._shapes: list[tuple[str, str | None, str | None, int | None]] = []
        self._shape_of: dict[Any, tuple[Any, int]] = {}  # (id(row schema), op) -> (row schema, shape index)
        self._facts: list[_Facts] = []  # of the transactions of the rows collected
        self._outcome: Any = _NONE  # the outcome of the last row, whose facts are _facts[-1]
        self._transaction = -1  # the index of those facts

    def __len__(self) -> int:
        return len(self._columns[0])

    def _shape(self, change: Change) -> int:
        self._shapes.append((change.op, change.schema, change.table, change.relation_id))
        return len(self._shapes) - 1

    def add(self, decoded: Decoded) -> None:
        change = decoded.change
        outcome = decoded.outcome
        if outcome is not self._outcome:
            self._outcome = outcome
            self._facts.append(_NO_TRANSACTION if outcome is None else _facts(outcome))
            self._transaction = len(self._facts) - 1
        op = change.op
        new = old = key = None
        toasted: list[str] | None = None
        if op in _OPS:
            schema = change.row_schema
            cached = self._shape_of.get((id(schema), op))
            if cached is None or cached[0] is not schema:
                cached = self._shape_of[(id(schema), op)] = (schema, self._shape(change))
            shape = cached[1]
            message: Any = change.message
            row_json, kind = self.json, message.__class__
            if kind is not Delete:  # an Insert (a snapshot row's too) or an Update: a new row
                toasted = []
                new = row_json(schema, message.new, toasted=toasted)
            if kind is not Insert:  # an Update or a Delete: the old key, or the old row
                key_columns, old_columns = message.key, message.old
                if key_columns is not None:
                    key = row_json(schema, key_columns, only_keys=True)
                elif old_columns is not None:
                    old = row_json(schema, old_columns)
                    key = row_json(schema, old_columns, only_keys=True)
        elif op == "truncate" and change.relations:  # one row per table it emptied, naming the table
            self._truncate(decoded, change)
            return
        else:
            shape = self._shape(change)
            relations = change.relations
            self._rare[len(self._columns[0])] = (
                [f"{s}.{t}" for s, t in relations] if relations is not None else None, change.cascade,
                change.restart_identity, change.prefix, change.content, change.transactional)
        append = self._append
        append[0](shape)
        append[1](self._transaction)
        append[2](change.subxid)
        append[3](change.lsn)
        append[4](decoded.position)
        append[5](new)
        append[6](old)
        append[7](key)
        append[8](toasted)

    def _truncate(self, decoded: Decoded, change: Change) -> None:
        """A truncate's rows, as ``replwire decode`` prints its lines: one per table, with the table's schema,
        name and relation id, and ``truncated`` listing every table of the one TRUNCATE."""
        assert change.relations is not None
        truncated = [f"{s}.{t}" for s, t in change.relations]
        ids: list[int | None] = list(change.relation_ids) if change.relation_ids else [None] * len(change.relations)
        append = self._append
        for (schema, table), relation_id in zip(change.relations, ids):
            self._shapes.append((change.op, schema, table, relation_id))
            self._rare[len(self._columns[0])] = (truncated, change.cascade, change.restart_identity, None, None,
                                                 None)
            for column, value in zip(append, (len(self._shapes) - 1, self._transaction, change.subxid, change.lsn,
                                              decoded.position, None, None, None, None)):
                column(value)

    def batch(self) -> pa.RecordBatch:
        """The rows collected so far, as one batch; the collector starts empty again."""
        rare, facts = self._rare, self._facts
        shape, transaction, subxid, lsn, position, new, old, key, toasted = self._columns
        count = len(shape)
        by_shape = pa.array(shape, pa.int32())
        by_transaction = pa.array(transaction, pa.int32())
        shapes = list(zip(*self._shapes)) or [(), (), (), ()]
        xid, commit_lsn, end_lsn, commit_time, origin, gid, streamed = zip(*facts) if facts else [()] * 7
        types = _CHANGES_ARROW.types

        def of(values: Sequence[Any], index: pa.Array, at: int) -> pa.Array:
            return pa.array(values, types[at]).take(index)

        def sparse(at: int, item: int) -> pa.Array:
            if not rare:
                return pa.nulls(count, types[at])
            values: list[Any] = [None] * count
            for row, extra in rare.items():
                values[row] = extra[item]
            return pa.array(values, types[at])

        # in _CHANGE_COLUMNS order
        columns = [of(shapes[0], by_shape, 0), of(shapes[1], by_shape, 1), of(shapes[2], by_shape, 2),
                   of(xid, by_transaction, 3), pa.array(subxid, types[4]), pa.array(lsn, types[5]),
                   of(commit_lsn, by_transaction, 6), of(end_lsn, by_transaction, 7),
                   of(commit_time, by_transaction, 8), pa.array(position, types[9]), of(shapes[3], by_shape, 10),
                   pa.array(new, types[11]), pa.array(old, types[12]), pa.array(key, types[13]),
                   pa.array(toasted, types[14]), sparse(15, 0), sparse(16, 1), sparse(17, 2), sparse(18, 3),
                   sparse(19, 4), sparse(20, 5), of(origin, by_transaction, 21), of(gid, by_transaction, 22),
                   of(streamed, by_transaction, 23)]
        out = pa.RecordBatch.from_arrays(columns, schema=_CHANGES_ARROW)
        # the next batch starts with the current transaction's facts at index 0, and no shapes
        self._columns = [[] for _ in range(9)]
        self._append = tuple(column.append for column in self._columns)
        self._rare, self._facts, self._shapes, self._shape_of = {}, facts[-1:], [], {}
        self._transaction = 0
        return out


def meta_names(columns: Iterable[str]) -> dict[str, str]:
    """The names of the columns the change rows of a table with ``columns`` add to the table's own, by
    their default names: the meta columns ``op``, ``schema``, ... ``position`` (:data:`META`) and the
    trailing ``_before``, ``_before_unchanged_toast``, ``_unchanged_toast`` and ``_unrepresentable``
    (:data:`EXTRA`) -- each given leading underscores until it differs from every column of the table,
    ignoring case as Spark does by default (``spark.sql.caseSensitive``): beside a column ``OP`` a column
    ``op`` is ambiguous, and Parquet written with both is refused.

    >>> names = meta_names(["id", "op", "_before", "_unchanged_toast", "__unchanged_toast", "Position"])
    >>> names["op"], names["schema"], names["position"], names["_before"], names["_unchanged_toast"]
    ('_op', 'schema', '_position', '__before', '___unchanged_toast')
    """
    taken = {c.lower() for c in columns}
    out = {}
    for name in [n for n, _, _ in META] + list(EXTRA):
        chosen = name
        while chosen.lower() in taken:
            chosen = "_" + chosen
        out[name] = chosen
        taken.add(chosen.lower())
    return out


def _types(version: RelationVersion, loader: ValueLoader) -> list[ColumnType]:
    return [column_type(c.type_id, c.type_modifier, t, loader)
            for c, t in zip(version.relation.columns, version.types)]


def default_values(version: RelationVersion, encoding: str) -> pa.Table | None:
    """The stored defaults of a table shape's columns (kind 1 of its ``ColumnDefaults``), typed as its change
    rows type them: a table of one row, or ``None`` when it has none (a value its column's type cannot hold
    is left out, as one the capture did not know)."""
    from .types import Unrepresentable

    loader = ValueLoader(encoding)
    fields, values = [], []
    for column, kind in zip(version.relation.columns, _types(version, loader)):
        found = version.defaults.get(column.name)
        if found is None or found[0] != 1:
            continue
        try:
            value = kind.value("t", found[1].encode(encoding))
        except (Unrepresentable, ValueError):
            continue
        fields.append(pa.field(column.name, kind.arrow))
        values.append(pa.array([value], kind.arrow))
    return pa.Table.from_arrays(values, schema=pa.schema(fields)) if fields else None


def table_schema(version: RelationVersion, loader: ValueLoader | None = None) -> T.StructType:
    """The Spark schema of the typed change rows of one table shape (see the module docstring)."""
    loader = loader or ValueLoader()
    names = [c.name for c in version.relation.columns]
    types = _types(version, loader)
    meta = meta_names(names)
    row = [T.StructField(n, t.spark, True) for n, t in zip(names, types)]
    return T.StructType([T.StructField(meta[n], t, True) for n, t, _ in META] + row + [
        T.StructField(meta["_before"], T.StructType(row), True),
        T.StructField(meta["_before_unchanged_toast"], T.ArrayType(T.StringType(), False), True),
        T.StructField(meta["_unchanged_toast"], T.ArrayType(T.StringType(), False), True),
        T.StructField(meta["_unrepresentable"], T.MapType(T.StringType(), T.StringType(), False), True)])


class TableRows:
    """Collects the typed change rows of one table shape (``version``) into Arrow batches.

    Feed it the :class:`Decoded` changes of that shape (from ``decode_part(..., rows=False)``; the values
    are read from the wire columns here) -- inserts, updates, deletes, and truncates naming the table --
    and the rows of the compiled column path's runs of cells (:meth:`add_cells`, :func:`table_batches`).

    Strategy: a row keeps its wire tuples until the batch is made; then each column is read for all the
    batch's rows at once, as two Arrow arrays (the values' kinds and bytes, made from the tuples, or taken
    from a run's cells without a Python object per row): by :attr:`ColumnType.texts` where it reads them all,
    else value by value (each distinct value once); the old tuples' first (``_before``), then the new ones';
    a delete's row is its old tuple's values (``if_else`` in Arrow).  The transaction facts are kept once per
    transaction, as in :class:`ChangeRows`.
    """

    def __init__(self, version: RelationVersion, loader: ValueLoader | None = None) -> None:
        self.version = version
        loader = loader or ValueLoader()
        self.encoding = loader.encoding  # of the text of a value kept as its server text
        self.names = [c.name for c in version.relation.columns]
        self.types = _types(version, loader)
        self.meta = meta_names(self.names)
        row_fields = [pa.field(n, t.arrow, True) for n, t in zip(self.names, self.types)]
        self._struct = pa.struct(row_fields)
        meta = self.meta
        self.arrow = pa.schema([pa.field(meta[n], a, True) for n, _, a in META] + row_fields + [
            pa.field(meta["_before"], self._struct, True),
            pa.field(meta["_before_unchanged_toast"], pa.list_(pa.field("element", pa.string(), False)), True),
            pa.field(meta["_unchanged_toast"], pa.list_(pa.field("element", pa.string(), False)), True),
            pa.field(meta["_unrepresentable"], _UNREPRESENTABLE, True)])
        #: op, transaction index, subxid, lsn, position, new tuple, old tuple (the key or the old row)
        self._columns: list[list[Any]] = [[] for _ in range(7)]
        self._append = tuple(column.append for column in self._columns)
        self._facts: list[_Facts] = []
        self._outcome: Any = _NONE
        self._transaction = -1
        self._ready: list[pa.RecordBatch] = []  # batches made of earlier rows
        self._ready_rows = 0
        #: runs' rows not typed yet (see add_cells): per run, its cells' kinds and bytes, each row's first cell
        #: of its new and of its old tuple (-1: none), and the rows' meta columns
        self._cells: list[tuple[pa.Array, pa.Array, pa.Array, pa.Array, list[pa.Array]]] = []
        self._cell_rows = self._cell_bytes = 0

    def __len__(self) -> int:
        return len(self._columns[0]) + self._cell_rows + self._ready_rows

    def _made(self, batch: pa.RecordBatch) -> None:
        self._ready.append(batch)
        self._ready_rows += batch.num_rows

    def add(self, decoded: Decoded) -> None:
        if self._cells:  # rows stay in the order they came
            self._made(self._cells_batch())
        change = decoded.change
        outcome = decoded.outcome
        if outcome is not self._outcome:
            self._outcome = outcome
            self._facts.append(_NO_TRANSACTION if outcome is None else _facts(outcome))
            self._transaction = len(self._facts) - 1
        new = old = None
        if change.op != "truncate":
            message: Any = change.message
            kind = message.__class__
            if kind is not Delete:
                new = message.new
            if kind is not Insert:
                old = message.key or message.old
        width = len(self.names)
        for row in (new, old):
            if row is not None and len(row) != width:
                raise self._misfit(len(row), decoded.position)
        append = self._append
        append[0](change.op)
        append[1](self._transaction)
        append[2](change.subxid)
        append[3](change.lsn)
        append[4](decoded.position)
        append[5](new)
        append[6](old)

    def _misfit(self, width: int, position: int) -> ValueError:
        return ValueError(f"a row of {width} columns at position {position} for {self.version.name}, whose shape "
                          f"there ({self.version.version}) has {len(self.names)}: the stream sends changes of "
                          "another relation of that name")

    def add_cells(self, run: ColumnRun, rows: pa.Array, widths: set[int], position: int) -> None:
        """Add the rows of ``run`` (whose images are cells, see :func:`~replwire.codec.split.columns.part_changes`)
        at the indices ``rows`` (all of this table in this shape, their tuples ``widths`` columns wide, the
        first at ``position``).  They are typed with the rows of the runs after them, up to a batch: a run
        holds few rows of one table, and typing a column costs the same few Arrow calls for any number."""
        if widths != {len(self.names)}:
            raise self._misfit(min(widths - {len(self.names)}), position)
        if len(self._columns[0]):
            self._made(self._batch())
        buffers = dict(zip(BUFFERS, (None if b is None else pa.py_buffer(b) for b in run.buffers)))
        count = run.rows

        def fixed(kind: pa.DataType, name: str, valid: str | None = None) -> pa.Array:
            return pa.Array.from_buffers(kind, count, [buffers[valid] if valid else None, buffers[name]]).take(rows)

        cells = buffers["cell_kind"].size  # type: ignore[union-attr]
        kinds = pa.Array.from_buffers(pa.uint8(), cells, [None, buffers["cell_kind"]])
        data = pa.Array.from_buffers(pa.binary(), cells, [None, buffers["cell_off"], buffers["cell"]])
        ops = pa.array([shape[0] for shape in run.shapes], pa.string()).take(fixed(pa.int32(), "shape"))
        time = fixed(pa.int64(), "commit_time", "time_ok").cast(pa.timestamp("us", tz="UTC"))
        meta = [ops, fixed(pa.int64(), "xid"), fixed(pa.int64(), "subxid", "subxid_ok"),
                fixed(pa.int64(), "lsn", "lsn_ok"), fixed(pa.int64(), "commit_lsn"), time,
                fixed(pa.int64(), "position"), pa.nulls(len(rows), pa.string())]
        self._cells.append((kinds, data, fixed(pa.int32(), "new_at"), fixed(pa.int32(), "old_at"), meta))
        self._cell_rows += len(rows)
        self._cell_bytes += buffers["cell"].size  # type: ignore[union-attr]
        if self._cell_bytes > _PENDING_BYTES:  # (the runs' buffers, every table's cells, are kept till then)
            self._made(self._cells_batch())

    def _cells_batch(self) -> pa.RecordBatch:
        """The runs' rows added since the last batch (:meth:`add_cells`), as one batch."""
        import numpy

        pending, self._cells, self._cell_rows, self._cell_bytes = self._cells, [], 0, 0
        kinds = pa.concat_arrays([p[0] for p in pending])
        every_kind = kinds.to_numpy()  # (no copy: the kinds have no nulls)
        data = pa.concat_arrays([p[1] for p in pending])
        starts = [0]
        for p in pending[:-1]:
            starts.append(starts[-1] + len(p[0]))
        meta = [pa.concat_arrays([p[4][i] for p in pending]) for i in range(len(pending[0][4]))]

        def tuple_of(place: int) -> _Tuples | None:
            # each row's first cell in the concatenated cells (null: no tuple)
            taken = pa.concat_arrays([pc.if_else(pc.equal(p[place], -1), None, pc.add(p[place], start).cast(pa.int64()))
                                      for p, start in zip(pending, starts)])
            if taken.null_count == len(taken):
                return None

            def column(i: int) -> tuple[pa.Array, pa.Array]:
                index = pc.add(taken, i)
                return kinds.take(index), data.take(index)
            firsts = taken.drop_null().to_numpy()
            cells = (firsts[:, None] + numpy.arange(len(self.names))).ravel()
            return column, pc.is_valid(taken), set(numpy.unique(every_kind[cells]).tolist())
        return self._assemble(len(meta[0]), meta, tuple_of(2), tuple_of(3))

    def _read(self, column: Callable[[int], tuple[pa.Array, pa.Array]], toasted: dict[int, list[str]],
              odd: dict[int, list[tuple[str, str]]], present: set[int] | None) -> list[pa.Array]:
        """Each column's values of a tuple per row (``column(i)``: the kinds of the rows' values of column
        ``i`` -- null where a row has no tuple -- and their bytes), naming a row's unchanged TOASTed columns
        in ``toasted`` and its unrepresentable values in ``odd`` (by row index).  ``present``: the kinds the
        tuples' cells have, where known; a column is searched for the others only where they are there."""
        out = []
        rare = present is None or not present <= {_T, _N}  # unchanged TOAST, binary
        others = present is None or not present <= {_T}  # a cell with no text: its value is null here
        for i, (name, kind_type) in enumerate(zip(self.names, self.types)):
            kinds, data = column(i)
            if rare:
                unchanged = pc.equal(kinds, _U)
                if pc.any(unchanged).as_py():
                    for row in pc.indices_nonzero(pc.fill_null(unchanged, False)).to_pylist():
                        toasted.setdefault(row, []).append(name)
            if kind_type.texts is not None and (not rare or not pc.any(pc.equal(kinds, _B)).as_py()):
                made = kind_type.texts(pc.if_else(pc.equal(kinds, _T), data, None) if others else data)
                if made is not None:
                    out.append(made)
                    continue
            out.append(self._each(name, kind_type, kinds, data, odd))
        return out

    def _each(self, name: str, kind_type: ColumnType, kinds: pa.Array, data: pa.Array,
              odd: dict[int, list[tuple[str, str]]]) -> pa.Array:
        """A column read value by value (:meth:`ColumnType.value`), each distinct value once where they are
        all text or all binary (a column is one or the other): values repeat (an interval, a status array),
        and reading one costs far more than finding its repeats."""
        sent = pc.fill_null(pc.or_(pc.equal(kinds, _T), pc.equal(kinds, _B)), False)
        found = pc.unique(kinds.filter(sent)).to_pylist()
        index = None
        if len(found) == 1:
            distinct = pc.unique(data.filter(sent))
            index = pc.index_in(pc.if_else(sent, data, None), distinct)
            pairs = [(found[0], datum) for datum in distinct.to_pylist()]
        else:
            pairs = list(zip(kinds.to_pylist(), data.to_pylist()))
        value = kind_type.value
        values: list[Any] = []
        refused: dict[int, str] = {}
        for at, (kind, datum) in enumerate(pairs):
            if kind != _T and kind != _B:
                values.append(None)
                continue
            try:
                values.append(value(chr(kind), datum))
            except Unrepresentable as error:
                values.append(None)
                refused[at] = datum.decode(self.encoding, "replace") if kind == _T else str(error)
        made = pa.array(values, kind_type.arrow)
        for at, text in refused.items():
            rows = [at] if index is None else pc.indices_nonzero(pc.fill_null(pc.equal(index, at), False)).to_pylist()
            for row in rows:
                odd.setdefault(row, []).append((name, text))
        return made if index is None else made.take(index)

    def batch(self) -> pa.RecordBatch:
        """The rows collected so far, as one batch; the collector starts empty again."""
        if self._cells:
            self._made(self._cells_batch())
        if len(self._columns[0]) or not self._ready:
            self._made(self._batch())
        ready, self._ready, self._ready_rows = self._ready, [], 0
        return ready[0] if len(ready) == 1 else pa.Table.from_batches(ready).combine_chunks().to_batches()[0]

    def _batch(self) -> pa.RecordBatch:
        """The rows added one by one since the last batch, as a batch."""
        ops, transaction, subxid, lsn, position, new, old = self._columns
        facts = self._facts
        by_transaction = pa.array(transaction, pa.int32())
        xid, commit_lsn, _, commit_time, _, gid, _ = zip(*facts) if facts else [()] * 7
        types = [f.type for f in self.arrow]

        def of(values: Sequence[Any], at: int) -> pa.Array:
            return pa.array(values, types[at]).take(by_transaction)

        meta = [pa.array(ops, types[0]), of(xid, 3), pa.array(subxid, types[4]), pa.array(lsn, types[5]),
                of(commit_lsn, 6), of(commit_time, 7), pa.array(position, types[8]), of(gid, 9)]

        def tuple_of(tuples: list[Any]) -> _Tuples | None:
            if all(t is None for t in tuples):
                return None

            def column(i: int) -> tuple[pa.Array, pa.Array]:
                cells = [t[i] if t is not None else None for t in tuples]
                return (pa.array([ord(c.kind) if c is not None else None for c in cells], pa.uint8()),
                        pa.array([c.data if c is not None else None for c in cells], pa.binary()))
            return column, pa.array([t is not None for t in tuples], pa.bool_()), None
        out = self._assemble(len(ops), meta, tuple_of(new), tuple_of(old))
        self._columns = [[] for _ in range(7)]
        self._append = tuple(column.append for column in self._columns)
        self._facts = facts[-1:]
        self._transaction = 0
        return out

    def _assemble(self, count: int, meta: list[pa.Array], new: _Tuples | None, old: _Tuples | None) -> pa.RecordBatch:
        """A batch of ``count`` rows: ``meta`` (op, xid, subxid, lsn, commit_lsn, commit_time, position, gid)
        and the rows' new and old tuples (each its columns, see :meth:`_read`, and which rows have one;
        ``None``: no row has one)."""
        types = [f.type for f in self.arrow]
        before_toasted: dict[int, list[str]] = {}
        toasted: dict[int, list[str]] = {}
        odd: dict[int, list[tuple[str, str]]] = {}
        nothing = [pa.nulls(count, t.arrow) for t in self.types]
        before_columns = self._read(old[0], before_toasted, odd, old[2]) if old is not None else nothing
        before = (pa.StructArray.from_arrays(before_columns, fields=list(self._struct), mask=pc.invert(old[1]))
                  if old is not None else pa.nulls(count, self._struct))
        row = self._read(new[0], toasted, odd, new[2]) if new is not None else nothing
        if old is not None:  # a delete's row is its old tuple's values
            row = [pc.if_else(new[1], n, b) for n, b in zip(row, before_columns)] if new is not None else before_columns

        def sparse(values: dict[int, Any], at: int) -> pa.Array:
            if not values:
                return pa.nulls(count, types[at])
            out: list[Any] = [None] * count
            for index, value in values.items():
                out[index] = value
            return pa.array(out, types[at])

        width = len(self.names)
        version = self.version
        op, xid, subxid, lsn, commit_lsn, commit_time, position, gid = meta
        # in the order of self.arrow: META, the table's columns, then the four trailing columns
        columns = [op, pa.repeat(pa.scalar(version.schema, pa.string()), count),
                   pa.repeat(pa.scalar(version.table, pa.string()), count), xid, subxid, lsn, commit_lsn,
                   commit_time, position, gid, *row, before, sparse(before_toasted, 10 + width + 1),
                   sparse(toasted, 10 + width + 2), sparse(odd, 10 + width + 3)]
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow)


def batches(rows: ChangeRows | TableRows, decoded: Iterable[Decoded], size: int = 8192) -> Iterator[pa.RecordBatch]:
    """Feed ``decoded`` to ``rows`` and yield a batch every ``size`` rows (and the rest at the end)."""
    add, count = rows.add, 0
    for item in decoded:
        add(item)
        count += 1
        if count == size:
            yield rows.batch()
            count = 0
    if len(rows):
        yield rows.batch()


def table_runs(run: ColumnRun) -> Iterator[tuple[str, str, pa.Array, int, bool, set[int]]]:
    """The rows of a run of cells (:func:`~replwire.codec.split.columns.part_changes` with ``cells``) table by
    table: its schema and name, the rows' indices in the run (in order), the first one's position, whether
    an update among them carries an old or key tuple, and their tuples' widths.  A table's rows in a run are
    all of one shape of it: a shape changes at a Relation message, and the only ones a run takes are those a
    stream block sends again unchanged."""
    buffers = dict(zip(BUFFERS, run.buffers))

    def of(name: str) -> pa.Array:
        return pa.Array.from_buffers(pa.int32() if name != "position" else pa.int64(), run.rows,
                                     [None, pa.py_buffer(buffers[name])])
    shape, old_at, position = of("shape"), of("old_at"), of("position")
    slots = pc.divide(shape, 3)
    old_updates = pc.and_(pc.equal(pc.subtract(shape, pc.multiply(slots, 3)), 1), pc.not_equal(old_at, -1))
    tables: dict[tuple[str, str], list[int]] = {}  # a table may have several relation ids (dropped, made again)
    for slot in pc.unique(slots).to_pylist():
        tables.setdefault(run.shapes[3 * slot][1:3], []).append(slot)
    for (schema, table), of_table in tables.items():
        rows = pc.indices_nonzero(pc.is_in(slots, pa.array(of_table, pa.int32())))
        yield (schema, table, rows, position[rows[0].as_py()].as_py(),
               bool(pc.any(old_updates.take(rows)).as_py()), {run.widths[slot] for slot in of_table})


def table_batches(part: Part, version: RelationVersion, wanted: Callable[[int], bool],
                  size: int = 8192) -> Iterator[pa.RecordBatch]:
    """The batches of :func:`table_schema` of one part: its changes of ``version``'s table (and truncates
    naming it) at the positions ``wanted`` takes, the runs of plain transactions read from the compiled column
    path's cells, the rest from ``decode_part``."""
    rows = TableRows(version, ValueLoader(part.source.encoding))
    name = (version.schema, version.table)
    for item in part_changes(part, size, cells=True):
        if isinstance(item, ColumnRun):
            for schema, table, indices, position, _, widths in table_runs(item):
                if (schema, table) == name and wanted(position):
                    rows.add_cells(item, indices, widths, position)
        else:
            change = item.change
            if ((change.relations is not None and name in change.relations if change.op == "truncate"
                 else (change.schema, change.table) == name) and wanted(item.position)):
                rows.add(item)
            else:
                continue
        if len(rows) >= size:
            yield rows.batch()
    if len(rows):
        yield rows.batch()


def change_batches(part: Part, size: int = 8192) -> Iterator[pa.RecordBatch]:
    """The :data:`CHANGES` batches of one part: the rows ``batches(ChangeRows(), decode_part(part,
    rows=False), size)`` gives, in the same order, with the runs of plain transactions the compiled column
    path wrote (:func:`~replwire.codec.split.columns.part_changes`) wrapped as batches of their own."""
    rows = ChangeRows(ValueLoader(part.source.encoding))
    add, count = rows.add, 0
    for item in part_changes(part, size):
        if isinstance(item, ColumnRun):
            if count:
                yield rows.batch()
                count = 0
            yield _run_batch(item)
            continue
        add(item)
        count += 1
        if count == size:
            yield rows.batch()
            count = 0
    if count:
        yield rows.batch()


def _run_batch(run: ColumnRun) -> pa.RecordBatch:
    """A :class:`ColumnRun`'s rows as a batch: its buffers wrapped as Arrow arrays (no copy), the shape's
    columns taken from the run's shapes; a run's rows are inserts, updates and deletes of plain and streamed
    transactions without origin or two-phase, so the columns of truncates, logical messages, origins and
    two-phase transactions are null, and ``streamed`` is whether a row has a ``subxid``."""
    count = run.rows
    buffers = dict(zip(BUFFERS, (None if b is None else pa.py_buffer(b) for b in run.buffers)))
    types = _CHANGES_ARROW.types
    index = pa.Array.from_buffers(pa.int32(), count, [None, buffers["shape"]])
    ops, schemas, tables, relation_ids = zip(*run.shapes)

    def of(values: Sequence[Any], at: int) -> pa.Array:
        return pa.array(values, types[at]).take(index)

    def fixed(at: int, name: str, valid: str | None = None) -> pa.Array:
        return pa.Array.from_buffers(types[at], count, [buffers[valid] if valid else None, buffers[name]])

    def text(name: str) -> pa.Array:
        return pa.Array.from_buffers(pa.string(), count, [buffers[f"{name}_ok"], buffers[f"{name}_off"], buffers[name]])

    name_offsets = buffers["name_off"]
    assert name_offsets is not None  # (only validities are ever None)
    toasted = pa.Array.from_buffers(pa.string(), name_offsets.size // 4 - 1, [None, name_offsets, buffers["name"]])
    subxid = fixed(4, "subxid", "subxid_ok")
    # in _CHANGE_COLUMNS order
    columns = [of(ops, 0), of(schemas, 1), of(tables, 2), fixed(3, "xid"), subxid, fixed(5, "lsn", "lsn_ok"),
               fixed(6, "commit_lsn"), fixed(7, "end_lsn"), fixed(8, "commit_time", "time_ok"), fixed(9, "position"),
               of(relation_ids, 10), text("new"), text("old"), text("key"),
               pa.Array.from_buffers(types[14], count, [buffers["toast_ok"], buffers["toast_off"]], children=[toasted]),
               *(pa.nulls(count, types[at]) for at in range(15, 23)), subxid.is_valid()]
    return pa.RecordBatch.from_arrays(columns, schema=_CHANGES_ARROW)
