"""A ``foreachBatch`` writer that keeps Delta or Iceberg tables up to date from a live slot, exactly once.

>>> from replwire.spark import LakehouseWriter, register
>>> register(spark)  # doctest: +SKIP
>>> options = {"dsn": "host=/var/run/postgresql dbname=app", "slot": "app_lake", "publication": "app_pub",
...            "records": "true"}
>>> query = (spark.readStream.format("replwire").options(**options).load()
...          .writeStream.foreachBatch(LakehouseWriter("lake/", format="delta", options=options))
...          .option("checkpointLocation", "lake/_checkpoint").start())  # doctest: +SKIP

The query reads the slot with ``records`` on (:func:`replwire.spark.stream.records_schema`: the slot's rows
as the server sends them, whole transactions in ``(start, end]`` of the micro-batch, with the Relation
messages they need).  The writer writes a micro-batch's rows as a capture file under ``OUT/_batches/``
(with the header ``replwire capture`` would give it: the same stream name, so tables can be fed by either)
and applies it as ``replwire spark apply --format delta|iceberg`` applies a capture
(:func:`replwire.spark.jobs.apply`): typed columns, merges by key, unchanged TOASTed values kept, schema
changes followed, each table's position recorded in the commit that writes its rows.

Exactly once, with the slot acknowledged only after the tables: Spark calls the writer before it records
the micro-batch in the checkpoint's commit log, and the source moves the slot only once the batch is there
(:meth:`~replwire.spark.stream.ReplwireStreamReader.commit`).  Killed after a table's commit and before
the commit log, the query runs the batch again on restart; the changes at or before each table's position
are left out.  The writer's options must be the query's (``dsn``, ``slot``, ``publication``, ``binary``,
``protoVersion``, ``encoding``): they say how the rows were read.

Not carried on this path: the stored defaults of columns added with ``ADD COLUMN ... DEFAULT`` (a capture
records them; here the rows written before such a column was added get null in it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from replwire.codec.io.capture_file import CaptureHeader
from replwire.codec.scalars import LSN

from .stream import StreamOptions

__all__ = ["LakehouseWriter"]


class LakehouseWriter:
    """``foreachBatch(LakehouseWriter(out, format=..., options=...))`` (see the module docstring); ``catalog``
    and ``namespace`` are Iceberg's, as for ``apply``.  :attr:`last` is the last micro-batch's
    :class:`~replwire.spark.jobs.ApplySummary` (``None`` until one had rows)."""

    def __init__(self, out: str | os.PathLike[str], *, format: str = "delta", options: Mapping[str, str],
                 catalog: str | None = None, namespace: str | None = None) -> None:
        from . import delta, iceberg

        if format not in ("delta", "iceberg"):
            raise ValueError(f"replwire: LakehouseWriter writes Delta or Iceberg tables, not {format!r}")
        (delta.need_deltalake if format == "delta" else iceberg.need_pyiceberg)()
        self.stream = StreamOptions.parse(options)
        if not self.stream.records:
            raise ValueError('replwire: LakehouseWriter takes the slot\'s records: read the stream with the option '
                             'records "true" (and give the writer the same options)')
        self.out, self.format = os.fspath(out), format
        self.catalog, self.namespace = catalog, namespace
        self.last: Any = None
        self._header: CaptureHeader | None = None

    def header(self) -> CaptureHeader:
        """The capture header of the micro-batches' rows, from the server (once)."""
        if self._header is None:
            import psycopg

            def one(query: str) -> Any:
                found = conn.execute(query).fetchone()
                assert found is not None  # (each query returns a row)
                return found[0]

            with psycopg.connect(self.stream.dsn, autocommit=True) as conn:
                version = int(one("SELECT current_setting('server_version_num')"))
                database = one("SELECT current_database()")
                try:
                    system = one("SELECT system_identifier::text FROM pg_control_system()")
                except psycopg.errors.InsufficientPrivilege:
                    system = None
                encoding = conn.info.parameter_status("client_encoding") or "UTF8"
            options = self.stream.pgoutput(version)
            proto_version = int(options.pop("proto_version"))
            self._header = CaptureHeader(proto_version=proto_version, server_version=version, options=options,
                                         client_encoding=encoding, slot_name=self.stream.slot,
                                         system_identifier=system, database=database)
        return self._header

    def __call__(self, batch: Any, batch_id: int) -> None:
        from replwire.codec.io.capture_file import CaptureWriter

        from .jobs import apply

        rows = batch.toArrow()
        if not rows.num_rows:
            return
        rows = rows.sort_by("n")
        directory = os.path.join(self.out, "_batches")
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{batch_id}.rwc")
        if os.path.exists(path):  # left by a run killed in this batch: written anew
            os.remove(path)
        try:
            with CaptureWriter(path, self.header()) as writer:
                for lsn, xid, data in zip(rows.column("lsn").to_pylist(), rows.column("xid").to_pylist(),
                                          rows.column("data").to_pylist()):
                    writer.append(LSN(lsn), xid, data)
            self.last = apply(batch.sparkSession, [path], self.out, format=self.format, catalog=self.catalog,
                              namespace=self.namespace, encoding=self.stream.encoding)
        finally:
            if os.path.exists(path):
                os.remove(path)
