"""The per-table change dataset: what ``replwire spark changes`` writes, and what ``apply`` reads back.

Strategy: :func:`write` runs the first pass of :mod:`replwire.codec.split` on the driver, then one Spark task
per part decodes it *once* and writes the typed change rows of every table it meets
(:class:`~replwire.spark.rows.TableRows`) straight to Parquet, one file per table shape per part:
``OUT/<schema>.<table>/v<N>/part-<part>.parquet`` (a task that runs again rewrites the same file, so retries
are harmless).  Logical messages go to ``OUT/_messages``.  ``OUT/_replwire.json`` (:data:`MANIFEST`)
describes what was written: every table shape with its columns, key columns, replica identity and row count,
and what an apply must know before it folds: the ``(commit_lsn, position)`` of each TRUNCATE, and whether an
update carried the row's old key or old image.  The readers (:func:`read_changes`, :func:`shapes_by_table`,
...) give a table's change rows back in commit order, as the folds take them.

Every timestamp with time zone (``commit_time``, ``timestamptz`` columns) is written as Parquet INT64
``TIMESTAMP_MICROS`` adjusted to UTC, which pyarrow reads as ``timestamp[us, tz=UTC]``.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replwire.codec.stream.tables import TableFilter

__all__ = ["MANIFEST", "ApplySummary", "ChangesSummary", "change_files", "check_out", "column_fills", "dir_name",
           "prepare_out", "read_changes", "rows_schema", "shapes_by_table", "truncations", "write"]

MANIFEST = "_replwire.json"
#: The most input one task of the changes job decodes when the job chooses: the parts are as few as keep
#: every core busy, in rounds of one part per core.  A task costs Spark some 40 ms on top of its work, and a
#: part its first transactions through the Python path and a Parquet file per table; on the real-schema
#: benchmark's 141 MB stream, 2 parts on two cores took 0.6 s, 8 parts 0.9 s.
MOST_PART_BYTES = 128 << 20
_BATCH_ROWS = 8192  # rows per batch the changes job writes


@dataclass
class ChangesSummary:
    """What :func:`write` (``replwire spark changes``) wrote."""

    out: str
    records: int
    transactions: int
    parts: int
    rows: dict[str, dict[int, int]] = field(default_factory=dict)  # table -> version -> rows
    messages: int = 0
    tails: list[str] = field(default_factory=list)
    #: those of ``tails`` that are damage inside a file (intact records after it), not a torn end
    damaged: list[str] = field(default_factory=list)
    #: table -> version -> the ``(commit_lsn, position)`` of each TRUNCATE of the table, in stream order
    truncates: dict[str, dict[int, list[tuple[int, int]]]] = field(default_factory=dict)
    #: table -> the versions with an update that carried the row's old key or old image
    old_images: dict[str, set[int]] = field(default_factory=dict)
    #: ``schema.table.column`` of the columns added during the capture with a default the server wrote into
    #: each row (a volatile default, or the table rewritten before the capture read the catalog): the rows the
    #: stream has not sent since hold values the capture does not know
    unknown_defaults: list[str] = field(default_factory=list)
    #: the executors that decoded the parts -> the codec each ran, ``("c", "")`` or ``("python", why)``
    #: (:func:`replwire.spark.shipping.codec_status`)
    executors: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: parts not decoded: every change in them was applied already (``apply --format delta|iceberg``)
    skipped: int = 0

    @property
    def changes(self) -> int:
        return sum(n for versions in self.rows.values() for n in versions.values())


@dataclass
class ApplySummary:
    """What :func:`replwire.spark.jobs.apply` wrote: rows per table."""

    out: str
    rows: dict[str, int]
    changes: ChangesSummary
    #: ``format="delta"`` or ``"iceberg"``: per table, what the run did to its table
    #: (:class:`~replwire.spark.increment.Applied`)
    applied: dict[str, Any] = field(default_factory=dict)


def dir_name(table: str) -> str:
    return urllib.parse.quote(table, safe=".-_ ")


def check_out(out: str, overwrite: bool) -> bool:
    """Whether ``out`` is a directory with something in it (which the jobs replace only with ``overwrite``:
    without it, :class:`FileExistsError`).  The CLI asks before it starts Spark."""
    if os.path.exists(out) and os.listdir(out):
        if not overwrite:
            raise FileExistsError(f"{out} exists and is not empty (use overwrite=True / --overwrite)")
        return True
    return False


def prepare_out(out: str, overwrite: bool) -> None:
    if check_out(out, overwrite):
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)


class _PartFiles:
    """What the changes job writes of one part: per table shape (and for logical messages, ``"_messages"``) a
    collector of its rows, written a batch at a time to a Parquet file of its own; per shape the ``(commit_lsn,
    position)`` of each TRUNCATE and whether an update carried an old image (what apply must know)."""

    def __init__(self, out: str, number: int) -> None:
        self.out, self.number = out, number
        self.collectors: dict[Any, Any] = {}
        self.writers: dict[Any, tuple[Any, str]] = {}
        self.counts: dict[Any, int] = {}
        self.truncates: dict[Any, list[tuple[int, int]]] = {}
        self.old_images: set[Any] = set()

    def rows(self, target: Any, make: Callable[..., Any], *args: Any) -> Any:
        """The collector of ``target``, made by ``make(*args)`` the first time."""
        rows = self.collectors.get(target)
        if rows is None:
            rows = self.collectors[target] = make(*args)
        return rows

    def added(self, target: Any, rows: Any) -> None:
        """Rows were added to ``target``'s collector: a batch is written once there are enough."""
        if len(rows) >= _BATCH_ROWS:
            self._write(target, rows)

    def _write(self, target: Any, rows: Any) -> None:
        import pyarrow.parquet as pq

        if not len(rows):
            return
        batch = rows.batch()
        writer = self.writers.get(target)
        if writer is None:
            directory = os.path.join(self.out, "_messages" if target == "_messages"
                                     else os.path.join(dir_name(target[0]), f"v{target[1]}"))
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f".part-{self.number:05d}.parquet.tmp")
            # dictionaries only for op, schema and table (the first three): for the other columns they cost
            # more time than they save space
            writer = self.writers[target] = (
                pq.ParquetWriter(path, batch.schema, use_dictionary=batch.schema.names[:3]), path)
        writer[0].write_batch(batch)
        self.counts[target] = self.counts.get(target, 0) + batch.num_rows

    def close(self) -> Iterator[tuple[Any, ...]]:
        """Write what is left, put each file in its place; per shape, what :func:`_decode_and_write` yields."""
        for target, rows in self.collectors.items():
            self._write(target, rows)
        for writer, path in self.writers.values():
            writer.close()
            os.replace(path, path.replace(f"{os.sep}.part-", f"{os.sep}part-").removesuffix(".tmp"))
        for target, n in self.counts.items():
            yield (("_messages", 0, n) if target == "_messages"
                   else (*target, n, self.truncates.get(target, []), target in self.old_images))


def _decode_and_write(parts: Iterator[Any], versions: list[Any], out: str,
                      codecs: Any = None) -> Iterator[tuple[Any, ...]]:
    """Spark task: decode parts, write each table shape's rows to its Parquet file; yield, per shape, the
    row count, the ``(commit_lsn, position)`` of each TRUNCATE and whether an update carried an old image
    (what an apply needs to know before it folds; ``("_messages", 0, n)`` for logical messages).  The
    codec the executor runs is added to ``codecs`` (:func:`replwire.spark.shipping.codec_accumulator`)."""
    from replwire.codec.messages import Update
    from replwire.codec.split import Shapes
    from replwire.codec.split.columns import ColumnRun, part_changes
    from replwire.codec.stream.values import ValueLoader

    from .rows import ChangeRows, TableRows, table_runs
    from .shipping import note_codec

    if codecs is not None:
        note_codec(codecs)
    loaders: dict[str, ValueLoader] = {}  # by client encoding (one: the inputs agree on it)
    shapes = Shapes(versions)

    for part in parts:
        encoding = part.source.encoding
        loader = loaders.get(encoding) or loaders.setdefault(encoding, ValueLoader(encoding))
        files = _PartFiles(out, part.number)
        for decoded in part_changes(part, cells=True):
            if isinstance(decoded, ColumnRun):  # plain transactions' rows from the compiled column path
                for schema, table, indices, position, old_image, widths in table_runs(decoded):
                    target = shapes.at(f"{schema}.{table}", position)
                    if target is None:
                        continue
                    key = (target.name, target.version)
                    rows = files.rows(key, TableRows, target, loader)
                    rows.add_cells(decoded, indices, widths, position)
                    if old_image:
                        files.old_images.add(key)
                    files.added(key, rows)
                continue
            change = decoded.change
            if change.op == "message":
                rows = files.rows("_messages", ChangeRows, loader)
                rows.add(decoded)
                files.added("_messages", rows)
                continue
            if change.op == "truncate":
                assert change.relations is not None  # a truncate change lists its tables (ChangeMaker.change)
                names = [f"{s}.{t}" for s, t in change.relations]
            else:
                names = [f"{change.schema}.{change.table}"]
            for name in names:
                target = shapes.at(name, decoded.position)
                if target is None:
                    continue
                key = (name, target.version)
                rows = files.rows(key, TableRows, target, loader)
                rows.add(decoded)
                if change.op == "truncate":
                    assert decoded.outcome is not None  # only a lone logical message has none
                    files.truncates.setdefault(key, []).append((int(decoded.outcome.commit_lsn), decoded.position))
                elif isinstance(change.message, Update) and (change.message.key or change.message.old):
                    files.old_images.add(key)
                files.added(key, rows)
        yield from files.close()


def write(spark: Any, inputs: list[Any], out: str, *, part_bytes: int | None, overwrite: bool,
          progress: Callable[[int, int], None] | None, tables: TableFilter | None = None,
          applied: Callable[[Any, list[Any]], int | None] | None = None) -> ChangesSummary:
    """:func:`replwire.spark.jobs.changes` of inputs already opened (:class:`~replwire.codec.split.Input` s):
    the change dataset of the tables ``tables`` keeps (all by default) under ``out``.  ``applied(plan,
    shapes)``, when given, says up to which commit LSN every table (of ``shapes``, those ``tables`` keeps)
    already holds the stream's changes (``None``: not known): the parts whose transactions all committed at
    or before it, and that hold no rows outside a transaction, are not decoded."""
    from replwire.codec.split import plan

    from .rows import default_values, table_schema
    from .shipping import codec_accumulator, ship

    ship(spark)
    parallelism = spark.sparkContext.defaultParallelism
    total = sum(i.size - i.first for i in inputs)
    rounds = max(1, -(-total // (parallelism * MOST_PART_BYTES)))  # of one part per core
    chosen = part_bytes or max(1 << 20, total // (parallelism * rounds) + 1)
    result = plan(inputs, part_bytes=chosen, min_parts=parallelism, progress=progress)
    prepare_out(out, overwrite)
    versions = [v for v in result.relations if tables is None or tables.matches(v.schema, v.table)]
    below = applied(result, versions) if applied is not None else None
    parts = [part for part in result.parts
             if below is None or part.outside or (part.commits() or (0, 0))[1] > below]
    codecs = codec_accumulator(spark)
    counted = []
    if parts:
        rdd = spark.sparkContext.parallelize(parts, len(parts))
        spark.sparkContext.setJobDescription(f"replwire changes: decode {len(parts)} parts")
        counted = rdd.mapPartitions(lambda parts: _decode_and_write(parts, versions, out, codecs)).collect()
    summary = ChangesSummary(out, result.records, result.transactions, len(result.parts),
                             tails=[f"{path}: {tail}" for path, tail in result.tails],
                             damaged=[f"{path}: {tail}" for path, tail in result.tails if tail.intact_from is not None],
                             executors=dict(codecs.value), skipped=len(result.parts) - len(parts))
    for table, version, n, *facts in counted:
        if table == "_messages":
            summary.messages += n
        else:
            summary.rows.setdefault(table, {}).setdefault(version, 0)
            summary.rows[table][version] += n
            summary.truncates.setdefault(table, {}).setdefault(version, []).extend(facts[0])
            if facts[1]:
                summary.old_images.setdefault(table, set()).add(version)
    for by_version in summary.truncates.values():
        for found in by_version.values():
            found.sort()
    filled = {}  # (table, version) -> the columns whose stored default read_changes fills in
    had: dict[str, set[str]] = {}  # table -> the columns of its shapes so far
    for v in versions:
        names = [c.name for c in v.relation.columns]
        if v.name in had:
            summary.unknown_defaults += [f"{v.name}.{n}" for n in names
                                         if n not in had[v.name] and v.defaults.get(n, (1,))[0] != 1]
        had.setdefault(v.name, set()).update(names)
        values = default_values(v, inputs[0].encoding) if v.defaults else None
        if values is not None:
            import pyarrow.parquet as pq

            os.makedirs(os.path.join(out, dir_name(v.name)), exist_ok=True)
            pq.write_table(values, os.path.join(out, dir_name(v.name), f"_defaults.v{v.version}.parquet"))
            filled[v.name, v.version] = values.column_names
    manifest = {"inputs": [i.path for i in inputs], "proto_version": inputs[0].proto_version,
                "tables": [{"table": v.name, "schema": v.schema, "name": v.table, "version": v.version,
                            "path": os.path.join(dir_name(v.name), f"v{v.version}"),
                            "rows": summary.rows.get(v.name, {}).get(v.version, 0),
                            "truncates": summary.truncates.get(v.name, {}).get(v.version, []),
                            "updates_with_old_image": v.version in summary.old_images.get(v.name, ()),
                            "replica_identity": v.relation.replica_identity,
                            "columns": [c.name for c in v.relation.columns],
                            "key": [c.name for c in v.relation.columns if c.flags & 1],
                            "defaults": filled.get((v.name, v.version), []),
                            "unknown_defaults": [name for name, (kind, _) in v.defaults.items() if kind != 1],
                            "spark_schema": table_schema(v).json()} for v in versions],
                "messages": summary.messages}
    with open(os.path.join(out, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    return summary


def rows_schema(last: dict[str, Any]) -> tuple[Any, dict[str, str]]:
    """The Spark schema of a table's current rows (``last``: its last shape in the manifest) and the names
    of the fold's columns.  The fold's own columns, and the two apply writes after the table's, get names no
    column of the table has (a table may well have an "op", a "position" or an "_unchanged_toast"); each
    shape's change rows name their extra columns the same way, from that shape's columns
    (:func:`~replwire.spark.rows.meta_names`)."""
    from pyspark.sql import types as T

    from .rows import meta_names

    schema = T.StructType.fromJson(json.loads(last["spark_schema"]))
    names = meta_names(last["columns"])
    return T.StructType([schema[c] for c in last["columns"]] + [
        T.StructField(names["_unrepresentable"], T.MapType(T.StringType(), T.StringType(), False), True),
        T.StructField(names["_unchanged_toast"], T.ArrayType(T.StringType(), False), True)]), names


def truncations(entries: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The ``(commit_lsn, position)`` of every TRUNCATE of a table, from its shapes in the manifest: every
    task that folds some of its keys must hear of each."""
    return sorted((at, where) for entry in entries for at, where in entry["truncates"])


def change_files(changes_dir: str, entry: dict[str, Any]) -> list[str]:
    """The Parquet files of one table shape's change rows."""
    directory = os.path.join(changes_dir, entry["path"])
    if not entry["rows"] or not os.path.isdir(directory):
        return []
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory))
            if name.endswith(".parquet") and name[0] not in "._"]


def read_changes(changes_dir: str, entries: list[dict[str, Any]], arrow_schema: Any, bucket: int = 0,
                 buckets: int = 1) -> Any:
    """One table's change rows (``entries``: its shapes in the manifest, oldest first), read from their files,
    as one Arrow table in commit order laid out as :mod:`replwire.spark.fold` takes them, the columns cast to
    ``arrow_schema``'s (the table's last shape; a column a shape lacks is null); ``None`` when there are
    none.  With ``buckets`` (a power of two), only the keys whose low bits are ``bucket`` (and TRUNCATEs,
    which have no key)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from .rows import meta_names

    last = entries[-1]
    columns, types = last["columns"], arrow_schema.types
    key = last["key"] or columns
    key_types = [types[columns.index(k)] for k in key]
    parts = []
    for index, entry in enumerate(entries):
        meta = meta_names(entry["columns"])
        present = set(entry["columns"])
        filled = column_fills(changes_dir, entries[index + 1:], present)
        for path in change_files(changes_dir, entry):
            rows = pq.read_table(path, columns=[*(meta[m] for m in ("op", "commit_lsn", "position", "_before",
                                                                   "_unchanged_toast", "_unrepresentable")),
                                                *entry["columns"]])
            count = rows.num_rows
            before = rows.column(meta["_before"]).combine_chunks()  # the shape's key columns
            held = set(before.type.names) if pa.types.is_struct(before.type) else set()
            before = pa.StructArray.from_arrays(
                [before.field(k).cast(t) if k in held else pa.nulls(count, t) for k, t in zip(key, key_types)],
                names=list(key), mask=pc.is_null(before))
            changes = pa.Table.from_arrays(
                [rows.column(meta["op"]), rows.column(meta["commit_lsn"]), rows.column(meta["position"]),
                 *[rows.column(c).cast(t) if c in present else
                   pa.repeat(filled[c].cast(t), count) if c in filled else pa.nulls(count, t)
                   for c, t in zip(columns, types)],
                 before, rows.column(meta["_unchanged_toast"]), rows.column(meta["_unrepresentable"])],
                names=[f"f{i}" for i in range(len(columns) + 6)])
            if buckets > 1:
                number = changes.column(3 + columns.index(key[0])).cast(pa.int64())
                changes = changes.filter(pc.or_kleene(pc.is_null(number), pc.equal(
                    pc.bit_wise_and(number, buckets - 1), bucket)))
            parts.append(changes)
    if not parts:
        return None
    changes = pa.concat_tables(parts)
    return changes.take(pc.sort_indices(changes, [("f1", "ascending"), ("f2", "ascending")]))


def column_fills(changes_dir: str, later: list[dict[str, Any]], present: set[str]) -> dict[str, Any]:
    """The values of the columns a table shape lacks and a ``later`` shape added with a stored default (the
    manifest's ``defaults``): the rows written under the shape hold that value, as the server reads them."""
    import pyarrow.parquet as pq

    found: dict[str, Any] = {}
    for entry in later:
        added = [c for c in entry["columns"] if c not in present and c not in found]
        wanted = [c for c in added if c in entry.get("defaults", ())]
        if wanted:
            values = pq.read_table(os.path.join(changes_dir, dir_name(entry["table"]),
                                                f"_defaults.v{entry['version']}.parquet"), columns=wanted)
            found.update((c, values.column(c)[0]) for c in wanted)
        present = present | set(added)
    return found


def shapes_by_table(changes_dir: str) -> dict[str, list[dict[str, Any]]]:
    """Each table's shapes in the manifest of the changes in ``changes_dir``, oldest first."""
    with open(os.path.join(changes_dir, MANIFEST), encoding="utf-8") as handle:
        manifest = json.load(handle)
    by_table: dict[str, list[dict[str, Any]]] = {}
    for entry in manifest["tables"]:
        by_table.setdefault(entry["table"], []).append(entry)
    return by_table
