"""The pipeline jobs: per-table Parquet datasets of changes, and the current state of every table.

Strategy: :func:`changes` runs the first pass of :mod:`replwire.codec.partitions` on the driver, then one
Spark task per part decodes it *once* and writes the typed change rows of every table it meets
(:class:`~replwire.spark.rows.TableRows`) straight to Parquet, one file per table shape per part:
``OUT/<schema>.<table>/v<N>/part-<part>.parquet`` (a task that runs again rewrites the same file, so retries
are harmless).  Logical messages go to ``OUT/_messages``.  ``OUT/_replwire.json`` describes what was written:
every table shape with its columns, key columns, replica identity and row count.

:func:`apply` turns those changes into the current state of each table: rows are ordered by
``(commit_lsn, position)`` -- the order the server committed them in -- and folded per key (the replica
identity columns): an insert sets the row, an update replaces it (an unchanged TOASTed value keeps the value
the row had), a delete removes it, a TRUNCATE empties the table.  Keys are spread over Spark tasks by hash,
unless an update changed a key or the table has REPLICA IDENTITY FULL (rows are then matched by their whole
old image), in which case one task folds that table in order.  The result is written as Parquet:
``OUT/<schema>.<table>/`` with the table's columns (its last shape), ``_unrepresentable`` (see
:mod:`replwire.spark.types`) and ``_unchanged_toast`` -- the columns whose value the stream never carried
(an unchanged TOASTed value of a row last written before the capture began), which stay null.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ApplySummary", "ChangesSummary", "apply", "changes"]

MANIFEST = "_replwire.json"


@dataclass
class ChangesSummary:
    """What :func:`changes` wrote."""

    out: str
    records: int
    transactions: int
    parts: int
    rows: dict[str, dict[int, int]] = field(default_factory=dict)  # table -> version -> rows
    messages: int = 0
    tails: list[str] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return sum(n for versions in self.rows.values() for n in versions.values())


@dataclass
class ApplySummary:
    """What :func:`apply` wrote: rows per table."""

    out: str
    rows: dict[str, int]
    changes: ChangesSummary


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _dir_name(table: str) -> str:
    return urllib.parse.quote(table, safe=".-_ ")


def _prepare_out(out: str, overwrite: bool) -> None:
    if os.path.exists(out) and os.listdir(out):
        if not overwrite:
            raise FileExistsError(f"{out} exists and is not empty (use overwrite=True / --overwrite)")
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)


def _decode_and_write(parts: Iterator[Any], versions: list[Any], out: str) -> Iterator[tuple[str, int, int]]:
    """Spark task: decode parts, write each table shape's rows to its Parquet file; yield row counts."""
    import pyarrow.parquet as pq

    from replwire.codec.partitions import Shapes, decode_part
    from replwire.codec.values import ValueLoader

    from .rows import ChangeRows, TableRows

    loader = ValueLoader()
    shapes = Shapes(versions)

    for part in parts:
        collectors: dict[Any, Any] = {}
        writers: dict[Any, Any] = {}
        counts: dict[Any, int] = {}

        def flush(target: Any, rows: Any, final: bool = False) -> None:
            if not len(rows):
                return
            batch = rows.batch()
            writer = writers.get(target)
            if writer is None:
                if target == "_messages":
                    directory = os.path.join(out, "_messages")
                else:
                    directory = os.path.join(out, _dir_name(target[0]), f"v{target[1]}")
                os.makedirs(directory, exist_ok=True)
                path = os.path.join(directory, f".part-{part.number:05d}.parquet.tmp")
                writer = writers[target] = (pq.ParquetWriter(path, batch.schema), path)
            writer[0].write_batch(batch)
            counts[target] = counts.get(target, 0) + batch.num_rows

        for decoded in decode_part(part, rows=False):
            change = decoded.change
            if change.op == "message":
                rows = collectors.get("_messages")
                if rows is None:
                    rows = collectors["_messages"] = ChangeRows(loader)
                rows.add(decoded)
                if len(rows) >= 8192:
                    flush("_messages", rows)
                continue
            names = ([f"{s}.{t}" for s, t in change.relations] if change.op == "truncate"
                     else [f"{change.schema}.{change.table}"])
            for name in names:
                target = shapes.at(name, decoded.position)
                if target is None:
                    continue
                rows = collectors.get((name, target.version))
                if rows is None:
                    rows = collectors[(name, target.version)] = TableRows(target, loader)
                rows.add(decoded)
                if len(rows) >= 8192:
                    flush((name, target.version), rows)
        for target, rows in collectors.items():
            flush(target, rows)
        for target, (writer, path) in writers.items():
            writer.close()
            os.replace(path, path.replace(f"{os.sep}.part-", f"{os.sep}part-").removesuffix(".tmp"))
        for target, n in counts.items():
            yield ("_messages", 0, n) if target == "_messages" else (*target, n)


def changes(spark: Any, paths: Sequence[str], out: str, *, proto_version: int | None = None,
            part_bytes: int | None = None, overwrite: bool = False,
            progress: Callable[[int, int], None] | None = None) -> ChangesSummary:
    """Write the committed changes of ``paths`` (consecutive segments of one stream, in order) as per-table
    Parquet datasets under ``out`` (see the module docstring).  ``progress(done, total)`` hears how far the
    first pass (on the driver) has read, in bytes."""
    from replwire.codec.partitions import open_inputs, plan

    from .rows import table_schema

    inputs = open_inputs(list(paths), proto_version)
    parallelism = spark.sparkContext.defaultParallelism
    total = sum(i.size - i.first for i in inputs)
    chosen = part_bytes or max(1 << 20, min(32 << 20, total // max(1, 4 * parallelism) + 1))
    result = plan(inputs, part_bytes=chosen, min_parts=parallelism, progress=progress)
    _prepare_out(out, overwrite)
    versions = result.relations
    rdd = spark.sparkContext.parallelize(result.parts, len(result.parts))
    spark.sparkContext.setJobDescription(f"replwire changes: decode {len(result.parts)} parts")
    counted = rdd.mapPartitions(lambda parts: _decode_and_write(parts, versions, out)).collect()
    summary = ChangesSummary(out, result.records, result.transactions, len(result.parts),
                             tails=[f"{path}: {tail}" for path, tail in result.tails])
    for table, version, n in counted:
        if table == "_messages":
            summary.messages += n
        else:
            summary.rows.setdefault(table, {}).setdefault(version, 0)
            summary.rows[table][version] += n
    manifest = {"inputs": [i.path for i in inputs], "proto_version": inputs[0].proto_version,
                "tables": [{"table": v.name, "schema": v.schema, "name": v.table, "version": v.version,
                            "path": os.path.join(_dir_name(v.name), f"v{v.version}"),
                            "rows": summary.rows.get(v.name, {}).get(v.version, 0),
                            "replica_identity": v.relation.replica_identity,
                            "columns": [c.name for c in v.relation.columns],
                            "key": [c.name for c in v.relation.columns if c.flags & 1],
                            "spark_schema": table_schema(v).json()} for v in versions],
                "messages": summary.messages}
    with open(os.path.join(out, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    return summary


# ---------------------------------------------------------------------------------------------------------
# apply


def _fold(batches: Iterator[Any], columns: list[str], key: list[str], truncates: list[tuple[int, int]],
          arrow_schema: Any) -> Iterator[Any]:
    """Spark task: fold ordered change rows into the current rows (see the module docstring)."""
    import pyarrow as pa

    state: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    cut = 0
    index = {name: i for i, name in enumerate(columns)}
    key_at = [index[k] for k in key]

    def ident(values: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(values[i] for i in key_at)

    for batch in batches:
        for row in batch.to_pylist():
            order = (row["commit_lsn"], row["position"])
            while cut < len(truncates) and truncates[cut] <= order:
                state.clear()
                cut += 1
            op = row["op"]
            if op == "truncate":
                continue
            new = [row[c] for c in columns]
            before = row["_before"]
            old = [before[c] for c in columns] if before is not None else None
            if op == "insert":
                entry = {"values": new, "unknown": set(), "odd": dict(row["_unrepresentable"] or ())}
                state.setdefault(ident(new), []).append(entry)
                continue
            found = state.get(ident(old if old is not None else new))
            previous = found.pop(0) if found else None
            if found is not None and not found:
                del state[ident(old if old is not None else new)]
            if op == "delete":
                continue
            # an update: unchanged TOASTed values keep what the row had
            odd = dict(row["_unrepresentable"] or ())
            unknown: set[str] = set()
            for name in row["_unchanged_toast"] or ():
                i = index[name]
                if previous is not None and name not in previous["unknown"]:
                    new[i] = previous["values"][i]
                    if name in previous["odd"]:
                        odd[name] = previous["odd"][name]
                else:
                    unknown.add(name)
            state.setdefault(ident(new), []).append({"values": new, "unknown": unknown, "odd": odd})
    out: dict[str, list[Any]] = {c: [] for c in columns}
    odd_column: list[Any] = []
    unknown_column: list[Any] = []
    for entries in state.values():
        for entry in entries:
            for c, v in zip(columns, entry["values"]):
                out[c].append(v)
            odd_column.append(sorted(entry["odd"].items()) or None)
            unknown_column.append(sorted(entry["unknown"]) or None)
    arrays = [pa.array(out[c], type=arrow_schema.field(c).type) for c in columns]
    arrays.append(pa.array(odd_column, type=arrow_schema.field("_unrepresentable").type))
    arrays.append(pa.array(unknown_column, type=arrow_schema.field("_unchanged_toast").type))
    yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def apply(spark: Any, paths: Sequence[str], out: str, *, proto_version: int | None = None,
          part_bytes: int | None = None, overwrite: bool = False,
          progress: Callable[[int, int], None] | None = None) -> ApplySummary:
    """Write the current state of every table of ``paths`` under ``out`` (see the module docstring); the
    per-table changes it is computed from are kept in ``out/_changes``."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    _prepare_out(out, overwrite)
    changes_dir = os.path.join(out, "_changes")
    summary = changes(spark, paths, changes_dir, proto_version=proto_version, part_bytes=part_bytes,
                      progress=progress)
    with open(os.path.join(changes_dir, MANIFEST), encoding="utf-8") as handle:
        manifest = json.load(handle)
    by_table: dict[str, list[dict[str, Any]]] = {}
    for entry in manifest["tables"]:
        by_table.setdefault(entry["table"], []).append(entry)
    rows: dict[str, int] = {}
    for table, entries in by_table.items():
        last = entries[-1]
        schema = T.StructType.fromJson(json.loads(last["spark_schema"]))
        columns = last["columns"]
        key = last["key"] or columns
        types = {f.name: f.dataType for f in schema.fields}
        frames = []
        for entry in entries:
            if not entry["rows"]:
                continue
            df = spark.read.parquet(os.path.join(changes_dir, entry["path"]))
            present = set(entry["columns"])
            before = F.when(F.col("_before").isNotNull(), F.struct(*[
                (F.col(f"_before.{_quote(c)}") if c in present else F.lit(None)).cast(types[c]).alias(c)
                for c in columns]))
            frames.append(df.select(
                "op", "commit_lsn", "position",
                *[(F.col(_quote(c)) if c in present else F.lit(None)).cast(types[c]).alias(c) for c in columns],
                before.alias("_before"), "_unchanged_toast", "_unrepresentable"))
        fold_schema = T.StructType([schema[c] for c in columns] + [
            T.StructField("_unrepresentable", T.MapType(T.StringType(), T.StringType(), False), True),
            T.StructField("_unchanged_toast", T.ArrayType(T.StringType(), False), True)])
        target = os.path.join(out, _dir_name(table))
        if not frames:
            spark.createDataFrame([], fold_schema).write.parquet(target)
            rows[table] = 0
            continue
        df = frames[0]
        for other in frames[1:]:
            df = df.unionByName(other)
        truncates = sorted((r.commit_lsn, r.position) for r in df.where("op = 'truncate'")
                           .select("commit_lsn", "position").collect())
        same_key = " AND ".join(f"({_quote(k)} <=> _before.{_quote(k)})" for k in key)
        key_changes = last["replica_identity"] == "f" or bool(
            df.where(f"op = 'update' AND _before IS NOT NULL AND NOT ({same_key})").limit(1).count())
        spark.sparkContext.setJobDescription(f"replwire apply: {table}")
        spread = df.repartition(1) if key_changes else df.repartition(spark.sparkContext.defaultParallelism,
                                                                       *key)
        arrow_schema = to_arrow_schema(fold_schema, timezone="UTC")
        state = spread.sortWithinPartitions("commit_lsn", "position").mapInArrow(
            lambda batches, c=columns, k=key, t=truncates, a=arrow_schema: _fold(batches, c, k, t, a), fold_schema)
        state.write.parquet(target)
        rows[table] = spark.read.parquet(target).count()
    return ApplySummary(out, rows, summary)
