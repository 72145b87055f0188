"""The pipeline jobs: per-table Parquet datasets of changes (:func:`changes`, written by
:mod:`replwire.spark.dataset`), and the current state of every table (:func:`apply`).

:func:`apply` turns those changes into the current state of each table: rows are ordered by ``(commit_lsn,
position)`` -- the order the server committed them in -- and folded per key (the replica identity columns)
by :mod:`replwire.spark.fold` (the rules of :mod:`replwire.codec.stream.fold`): an insert sets the row, an
update replaces it (an unchanged TOASTed value keeps the value the row had), a delete removes it, a TRUNCATE
empties the table.  A table whose change rows fit in :data:`ONE_TASK_BYTES` is folded by one task that reads
its change files and writes its rows itself (the tables of a run are the tasks of one Spark job; past
:data:`SPLIT_BYTES`, a table keyed by an integer no update changed is split by key over a task per core): on a
table that size a shuffle costs several times the fold.  A larger table is read by Spark and its keys spread over
tasks by hash, unless an update carried an old key -- the server sends one when the key changed (and,
rarely, when a key value was stored out of line) -- or the table has REPLICA IDENTITY FULL (rows are then
matched by their whole old image), in which case one task folds that table in order; such tables are folded
at the same time, each from a driver thread of its own.  The result is written as Parquet:
``OUT/<schema>.<table>/`` with the table's columns (its last shape), ``_unrepresentable`` (see
:mod:`replwire.spark.types`) and ``_unchanged_toast`` -- the columns whose value the stream never carried
(an unchanged TOASTed value of a row last written before the capture began), which stay null.  These two,
like the extra columns of the change rows, take leading underscores until their names differ from every
column of the table (:func:`replwire.spark.rows.meta_names` of the table's last shape): a table with a
column ``_unrepresentable`` of its own gets ``__unrepresentable``.  Delta and Iceberg tables are brought up to
date by :mod:`replwire.spark.lakehouse` instead.

Both jobs write every timestamp with time zone (``commit_time``, ``timestamptz`` columns) as Parquet INT64
``TIMESTAMP_MICROS`` adjusted to UTC, which pyarrow reads as ``timestamp[us, tz=UTC]``: the changes job
through pyarrow, apply through Spark with ``spark.sql.parquet.outputTimestampType`` set to
``TIMESTAMP_MICROS`` while it runs (Spark's default, INT96, reads back as ``timestamp[ns]`` with no zone).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replwire.codec.stream.tables import TableFilter

from .dataset import (
    ApplySummary,
    ChangesSummary,
    change_files,
    column_fills,
    dir_name,
    prepare_out,
    read_changes,
    rows_schema,
    shapes_by_table,
    truncations,
    write,
)

__all__ = ["ApplySummary", "ChangesSummary", "apply", "changes"]


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@contextlib.contextmanager
def _timestamp_micros(spark: Any) -> Iterator[None]:
    """Spark writes timestamps as Parquet ``TIMESTAMP_MICROS`` (UTC-adjusted) inside the block; the session's
    setting is put back afterwards."""
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key)
    spark.conf.set(key, "TIMESTAMP_MICROS")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def changes(spark: Any, paths: Sequence[str], out: str, *, proto_version: int | None = None,
            encoding: str | None = None, part_bytes: int | None = None, overwrite: bool = False,
            progress: Callable[[int, int], None] | None = None, tables: TableFilter | None = None
            ) -> ChangesSummary:
    """Write the committed changes of ``paths`` (consecutive segments of one stream, in any order: they are
    read in stream order, see :func:`~replwire.codec.split.open_inputs`) as per-table
    Parquet datasets under ``out`` (see the module docstring).  ``proto_version`` and ``encoding`` are
    those of COPY-CSV inputs; ``encoding`` is also the encoding SQL_ASCII inputs are read in, and needed
    for them (see :func:`~replwire.codec.split.open_inputs`).  ``progress(done, total)`` hears how far the
    first pass (on the driver) has read, in bytes.  ``tables`` keeps only the tables it matches (logical
    messages are kept).  On a cluster, replwire is shipped to the executors first
    (:func:`replwire.spark.shipping.ship`)."""
    from replwire.codec.split import open_inputs

    inputs = open_inputs(list(paths), proto_version, encoding, need_text=True)
    return write(spark, inputs, out, part_bytes=part_bytes, overwrite=overwrite, progress=progress,
                    tables=tables)


# ---------------------------------------------------------------------------------------------------------
# apply


#: A table whose change rows take at most this many bytes in memory (their Parquet footers' uncompressed
#: sizes) is folded by one task that reads its change files and writes its rows itself: on a table that size
#: a shuffle costs several times the fold.  A larger one is spread over tasks by key.
ONE_TASK_BYTES = 256 << 20
#: Such a table keyed by one integer column that no update changed, whose change rows take more than this
#: many bytes, is folded by one task per core (a power of two of them), each taking the keys whose low bits
#: are its number: each reads all the table's files, but folds and writes only its keys.
SPLIT_BYTES = 32 << 20


def _one_task_bytes(changes_dir: str, entries: list[dict[str, Any]]) -> int | None:
    """The bytes of a table's change rows when one task folds it (see :data:`ONE_TASK_BYTES`): its columns
    kept their types across its shapes, and its rows fit; ``None`` when it is spread over tasks."""
    import pyarrow.parquet as pq

    last = entries[-1]
    kept = set(last["columns"])
    types = {f["name"]: f["type"] for f in json.loads(last["spark_schema"])["fields"] if f["name"] in kept}
    size = 0
    for entry in entries:
        fields = {f["name"]: f["type"] for f in json.loads(entry["spark_schema"])["fields"]}
        if any(name in types and fields[name] != types[name] for name in entry["columns"]):
            return None
        for path in change_files(changes_dir, entry):
            footer = pq.read_metadata(path)
            size += sum(footer.row_group(i).total_byte_size for i in range(footer.num_row_groups))
            if size > ONE_TASK_BYTES:
                return None
    return size if size <= ONE_TASK_BYTES else None


def _buckets(entries: list[dict[str, Any]], size: int, parallelism: int) -> int:
    """Into how many tasks a table folded by tasks reading its files is split (see :data:`SPLIT_BYTES`): 1, or
    a power of two no greater than ``parallelism``."""
    last = entries[-1]
    fields = {f["name"]: f["type"] for f in json.loads(last["spark_schema"])["fields"]}
    if (size <= SPLIT_BYTES or parallelism < 2 or len(last["key"]) != 1
            or fields.get(last["key"][0]) not in ("short", "integer", "long") or last["replica_identity"] == "f"
            or any(e["key"] != last["key"] or e["updates_with_old_image"] for e in entries)):
        return 1
    return 1 << (parallelism.bit_length() - 1)


def _fold_files(changes_dir: str, entries: list[dict[str, Any]], arrow_schema: Any, target: str, bucket: int = 0,
                buckets: int = 1) -> int:
    """Spark task: fold one table's change rows (``entries``: its shapes in the manifest, oldest first),
    read from their files (:func:`read_changes`), into its current rows, written as one Parquet file of
    ``arrow_schema`` in ``target``; the number of rows written.  With ``buckets``, only the keys of
    ``bucket`` (see :func:`read_changes`)."""
    import pyarrow.parquet as pq

    from .fold import fold_batches

    last = entries[-1]
    columns = last["columns"]
    key = last["key"] or columns
    changes = read_changes(changes_dir, entries, arrow_schema, bucket, buckets)
    os.makedirs(target, exist_ok=True)
    path = os.path.join(target, f".part-{bucket:05d}.parquet.tmp")
    written = 0
    with pq.ParquetWriter(path, arrow_schema) as writer:
        if changes is not None:
            for batch in fold_batches(changes.to_batches(), columns, key, truncations(entries), arrow_schema):
                writer.write_batch(batch)
                written += batch.num_rows
        else:
            writer.write_table(arrow_schema.empty_table())
    os.replace(path, os.path.join(target, f"part-{bucket:05d}.parquet"))
    return written


def _apply_in_tasks(spark: Any, changes_dir: str, tables: dict[str, tuple[list[dict[str, Any]], int]],
                    out: str) -> dict[str, int]:
    """Fold ``tables`` (name -> its shapes in the manifest and the bytes of its change rows), each by tasks
    of one Spark job that read its files (largest first; one task a table, or :func:`_buckets` of them),
    into their current rows under ``out``; rows written per table."""
    from pyspark.sql.pandas.types import to_arrow_schema

    parallelism = spark.sparkContext.defaultParallelism
    units = []
    for table, (entries, size) in tables.items():
        schema, target, buckets = (to_arrow_schema(rows_schema(entries[-1])[0], timezone="UTC"),
                                   os.path.join(out, dir_name(table)), _buckets(entries, size, parallelism))
        units += [(table, entries, schema, target, bucket, buckets) for bucket in range(buckets)]
    spark.sparkContext.setJobDescription(f"replwire apply: fold {len(tables)} tables in {len(units)} tasks")
    rows: dict[str, int] = {}
    for table, n in spark.sparkContext.parallelize(units, len(units)).map(
            lambda unit: (unit[0], _fold_files(changes_dir, *unit[1:]))).collect():
        rows[table] = rows.get(table, 0) + n
    return rows


def _apply_table(spark: Any, changes_dir: str, entries: list[dict[str, Any]], target: str) -> int:
    """Fold one table's change rows (``entries``: its shapes in the manifest, oldest first) into its current
    rows at ``target``, spread over tasks by key unless a key changed; the number of rows written."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    from .fold import fold_batches
    from .rows import meta_names

    last = entries[-1]
    table = last["table"]
    columns = last["columns"]
    key = last["key"] or columns
    fold_schema, names = rows_schema(last)
    types = {f.name: f.dataType for f in fold_schema.fields[:len(columns)]}
    lsn, position = _quote(names["commit_lsn"]), _quote(names["position"])
    frames = []
    for index, entry in enumerate(entries):
        if not entry["rows"]:
            continue
        df = spark.read.parquet(os.path.join(changes_dir, entry["path"]))
        present = set(entry["columns"])
        filled = {c: F.lit(value.as_py())
                  for c, value in column_fills(changes_dir, entries[index + 1:], present).items()}
        meta = {name: _quote(chosen) for name, chosen in meta_names(entry["columns"]).items()}
        before = F.when(F.col(meta["_before"]).isNotNull(), F.struct(*[
            (F.col(f"{meta['_before']}.{_quote(c)}") if c in present else F.lit(None)).cast(types[c]).alias(c)
            for c in key]))
        # the map as JSON: Spark hands a map column to Python several times slower than a string
        frames.append(df.select(
            F.col(meta["op"]).alias(names["op"]), F.col(meta["commit_lsn"]).alias(names["commit_lsn"]),
            F.col(meta["position"]).alias(names["position"]),
            *[(F.col(_quote(c)) if c in present else filled.get(c, F.lit(None))).cast(types[c]).alias(c)
              for c in columns],
            before.alias(names["_before"]), F.col(meta["_unchanged_toast"]).alias(names["_unchanged_toast"]),
            F.to_json(F.col(meta["_unrepresentable"])).alias(names["_unrepresentable"])))
    if not frames:
        spark.createDataFrame([], fold_schema).write.parquet(target)
        return 0
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    if last["replica_identity"] == "f":  # rows matched by their whole old image: one task, in order
        truncates: list[tuple[int, int]] = []  # the task meets every TRUNCATE row itself
        key_changes = True
    else:
        # Every task must hear of every TRUNCATE; and rows can be spread by key only if no key changed.  The
        # changes job noted both as it wrote the rows.  An update carries the old key only when its key
        # changed (or, rarely, when a key value was stored out of line): taken as a key change, it makes
        # the fold one task, which is right in every case.
        truncates = truncations(entries)
        key_changes = any(entry["updates_with_old_image"] for entry in entries)
    spark.sparkContext.setJobDescription(f"replwire apply: {table}")
    spread = df.coalesce(1) if key_changes else df.repartition(spark.sparkContext.defaultParallelism, *key)
    arrow_schema = to_arrow_schema(fold_schema, timezone="UTC")
    state = spread.sortWithinPartitions(F.col(lsn), F.col(position)).mapInArrow(
        lambda batches, c=columns, k=key, t=truncates, a=arrow_schema: fold_batches(batches, c, k, t, a), fold_schema)
    state.write.parquet(target)
    return _parquet_rows(target)


def _parquet_rows(directory: str) -> int:
    """Rows in the Parquet files Spark wrote to ``directory``, from their footers."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(os.path.join(directory, name)).num_rows
               for name in sorted(os.listdir(directory)) if name.endswith(".parquet") and name[0] not in "._")


def apply(spark: Any, paths: Sequence[str], out: str, *, proto_version: int | None = None,
          encoding: str | None = None, part_bytes: int | None = None, overwrite: bool = False,
          progress: Callable[[int, int], None] | None = None, format: str = "parquet",
          catalog: str | None = None, namespace: str | None = None, tables: TableFilter | None = None
          ) -> ApplySummary:
    """Write the current state of every table of ``paths`` under ``out`` (see the module docstring); the
    per-table changes it is computed from are kept in ``out/_changes``.

    The tables small enough (:data:`ONE_TASK_BYTES`) are folded by one Spark job, a task each; each larger
    table by Spark jobs of its own, started from a driver thread of its own and run at the same time: a table
    whose keys changed is folded by one task, and folding several at once keeps the other cores busy.  When a
    fold fails, the folds not yet started are not, the running Spark jobs of the others are cancelled, and
    that failure is raised (of failures seen at once, the small tables' job's first, then the larger tables'
    in the manifest's order).

    ``format="delta"`` or ``"iceberg"`` brings lakehouse tables up to date instead
    (:func:`replwire.spark.lakehouse.apply_inputs`;
    ``catalog`` and ``namespace`` are Iceberg's).  ``tables`` keeps only the tables it matches."""
    import uuid
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    from pyspark import inheritable_thread_target

    from replwire.codec.split import open_inputs

    inputs = open_inputs(list(paths), proto_version, encoding, need_text=True)  # refused before out is touched
    if format in ("delta", "iceberg"):
        from .lakehouse import apply_inputs

        return apply_inputs(spark, inputs, out, format=format, part_bytes=part_bytes, overwrite=overwrite,
                            progress=progress, catalog=catalog, namespace=namespace, tables=tables)
    if format != "parquet":
        raise ValueError(f"unknown format {format!r}: parquet, delta or iceberg")
    if catalog is not None or namespace is not None:
        raise ValueError("a catalog and a namespace are Iceberg's: --format parquet takes neither")
    prepare_out(out, overwrite)
    changes_dir = os.path.join(out, "_changes")
    summary = write(spark, inputs, changes_dir, part_bytes=part_bytes, overwrite=False, progress=progress,
                       tables=tables)
    by_table = shapes_by_table(changes_dir)
    context = spark.sparkContext
    tag = f"replwire-apply-{uuid.uuid4().hex}"
    sizes = {table: _one_task_bytes(changes_dir, entries) for table, entries in by_table.items()}
    small = {table: (by_table[table], sizes[table] or 0)
             for table in sorted((t for t in by_table if sizes[t] is not None), key=lambda t: -(sizes[t] or 0))}
    spread = {table: entries for table, entries in by_table.items() if sizes[table] is None}

    def tagged(call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            context.addJobTag(tag)
            try:
                return call(*args)
            finally:
                context.removeJobTag(tag)
        wrapped: Callable[..., Any] = inheritable_thread_target(spark)(run)  # each thread: its own local properties
        return wrapped

    def fold_table(table: str, entries: list[dict[str, Any]]) -> dict[str, int]:
        return {table: _apply_table(spark, changes_dir, entries, os.path.join(out, dir_name(table)))}

    workers = max(1, min(len(spread) + 1, 2 * context.defaultParallelism))
    with _timestamp_micros(spark), ThreadPoolExecutor(workers, thread_name_prefix="replwire-apply") as pool:
        futures = [pool.submit(tagged(_apply_in_tasks), spark, changes_dir, small, out)] if small else []
        futures += [pool.submit(tagged(fold_table), table, entries) for table, entries in spread.items()]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                if future in done and future.exception() is not None:
                    future.result()  # raises it
        except BaseException:
            for future in futures:
                future.cancel()
            context.cancelJobsWithTag(tag)
            raise
    folded = {table: n for future in futures for table, n in future.result().items()}
    rows = {table: folded[table] for table in by_table}
    return ApplySummary(out, rows, summary)
