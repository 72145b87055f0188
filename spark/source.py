"""The ``replwire`` batch data source: captured change streams as DataFrames, decoded in parallel.

>>> from replwire.spark import register
>>> register(spark)  # doctest: +SKIP
>>> changes = spark.read.format("replwire").load(["segment-1.rwc", "segment-2.rwc"])  # doctest: +SKIP
>>> orders = (spark.read.format("replwire").option("table", "public.orders")
...           .load("segment-1.rwc"))  # doctest: +SKIP

Strategy: :meth:`ReplwireReader.partitions` runs the first pass of :mod:`replwire.codec.split` (one
read of the inputs that parses only the few control messages) and turns each part into a Spark input
partition; :meth:`ReplwireReader.read` decodes one part on an executor and yields Arrow record batches
(:mod:`replwire.spark.rows`).  The result equals what one :class:`~replwire.codec.Assembler` gives for the
same inputs.

Options (all optional but the paths):

``path`` / ``load(paths)``
    Capture files or COPY-CSV files: consecutive segments of one stream, in any order (they are read in
    stream order, by the positions their records complete; files that cannot be one stream are refused,
    see :func:`~replwire.codec.split.open_inputs`).  A torn end of a
    capture file (an interrupted write) ends its records; a file damaged inside (intact records after a
    damaged one) fails the query, naming where.
``table``
    ``schema.table``: typed rows of that table instead of the change rows of every table.
``schemaVersion``
    With ``table``: which shape of the table (1, 2, ... as Relation messages changed it; default: the last).
``protoVersion``
    The protocol version of COPY-CSV inputs (capture files record theirs).
``encoding``
    The client encoding of COPY-CSV inputs (default ``UTF8``; capture files record theirs), and for inputs
    from a ``SQL_ASCII`` database -- bytes in no declared encoding, which Spark's strings cannot hold --
    the encoding to read them in (``UTF8``, or ``LATIN1``, which keeps every byte): such inputs are
    refused without it.
``partitionBytes``
    About how many bytes of input one partition decodes (default 32 MiB).
``minPartitions``
    Cut the inputs into at least this many partitions where they are big enough (default 1).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .options import Options

__all__ = ["BatchOptions", "ReplwireDataSource", "ReplwireReader", "input_paths"]

_BATCH_ROWS = 8192


def input_paths(options: Options) -> list[str]:
    """The input paths of ``load(path)`` or ``load([paths])`` (Spark passes a list as a JSON array)."""
    paths = options.get("paths")
    if paths:
        out = json.loads(paths)
    elif options.get("path"):
        out = [options.get("path")]
    else:
        raise ValueError("replwire: no input; use load(path) or load([path, ...])")
    return [str(p) for p in out]


class BatchOptions:
    """The batch source's options, checked, and the first pass over the inputs (the streaming source's are
    :class:`~replwire.spark.stream.StreamOptions`)."""

    def __init__(self, options: Any) -> None:
        from replwire.codec.split import open_inputs

        options = Options(options)
        self.inputs = open_inputs(input_paths(options), options.integer("protoVersion", None, 1),
                                  options.get("encoding"), need_text=True)
        self.table = options.get("table")
        self.schema_version = options.integer("schemaVersion", None, 1)
        self.part_bytes = options.integer("partitionBytes", 32 * 2**20, 1)
        self.min_parts = options.integer("minPartitions", 1, 1)
        self._plan: Any = None

    @property
    def plan(self) -> Any:
        if self._plan is None:
            from replwire.codec.split import plan

            self._plan = plan(self.inputs, part_bytes=self.part_bytes, min_parts=self.min_parts)
        return self._plan

    def version(self) -> Any:
        """The RelationVersion asked for with ``table`` (and ``schemaVersion``)."""
        versions = [v for v in self.plan.relations if v.name == self.table]
        if not versions:
            known = sorted({v.name for v in self.plan.relations})
            raise ValueError(f"replwire: no Relation message for table {self.table!r} in the inputs "
                             f"(tables seen: {', '.join(known) or 'none'})")
        if self.schema_version is None:
            return versions[-1]
        for v in versions:
            if v.version == self.schema_version:
                return v
        raise ValueError(f"replwire: table {self.table} has schema versions 1-{len(versions)}, not "
                         f"{self.schema_version}")


class ReplwireDataSource(DataSource):
    """``spark.read.format("replwire")``: see the module docstring for the options."""

    @classmethod
    def name(cls) -> str:
        return "replwire"

    def schema(self) -> StructType:
        options = Options(self.options)
        if options.boolean("records", False):  # readStream's slot rows (replwire.spark.stream)
            from .stream import records_schema

            return records_schema()
        if not options.get("table") or not (options.get("path") or options.get("paths")):
            from .rows import CHANGES

            return CHANGES
        from .rows import table_schema

        return table_schema(BatchOptions(self.options).version())

    def reader(self, schema: StructType) -> ReplwireReader:
        return ReplwireReader(self.options, schema)

    def streamReader(self, schema: StructType) -> Any:
        """``spark.readStream.format("replwire")``: changes from a live slot (:mod:`replwire.spark.stream`)."""
        from .stream import ReplwireStreamReader

        return ReplwireStreamReader(self.options, schema)


class _Part(InputPartition):
    def __init__(self, part: Any, version: Any, shapes: Any) -> None:
        super().__init__(part.number)
        self.part, self.version, self.shapes = part, version, shapes


class ReplwireReader(DataSourceReader):
    """Plans the parts on the driver and decodes one part per Spark partition."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = dict(options)
        self.schema = schema

    def partitions(self) -> list[_Part]:
        from replwire.codec.split import Shapes

        request = BatchOptions(self.options)
        damaged = [f"{path}: {tail}" for path, tail in request.plan.tails if tail.intact_from is not None]
        if damaged:  # a DataFrame of what comes before the damage would pass for the whole stream
            raise ValueError(f"replwire: {'; '.join(damaged)}")
        version, shapes = None, None
        if request.table:
            version = request.version()
            shapes = Shapes([v for v in request.plan.relations if v.name == request.table])
        return [_Part(part, version, shapes) for part in request.plan.parts]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _Part)  # Spark hands back the partitions that partitions() made

        from .rows import change_batches, table_batches

        if partition.version is None:
            yield from change_batches(partition.part, _BATCH_ROWS)
            return
        version, shapes = partition.version, partition.shapes

        def in_shape(position: int) -> bool:
            current = shapes.at(version.name, position)
            return current is not None and current.version == version.version

        yield from table_batches(partition.part, version, in_shape, _BATCH_ROWS)
