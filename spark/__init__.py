"""replwire on Apache Spark: captured change streams as DataFrames (see the Spark guide in the docs).

>>> from pyspark.sql import SparkSession
>>> from replwire.spark import register
>>> spark = SparkSession.builder.master("local[*]").getOrCreate()  # doctest: +SKIP
>>> register(spark)  # doctest: +SKIP
>>> spark.read.format("replwire").load("capture.rwc").show()  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from .shipping import announce as _announce

__all__ = ["LakehouseWriter", "register"]

_announce()  # on an executor running the copy replwire shipped to it: which codec it runs, to its log


def __getattr__(name: str) -> Any:
    if name == "LakehouseWriter":  # (imported when asked for: it brings the streaming source's modules)
        from .writer import LakehouseWriter

        return LakehouseWriter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark: Any) -> None:
    """Register the ``replwire`` data sources (batch and streaming) with a SparkSession; on a cluster, first
    ship replwire to its executors (:func:`replwire.spark.shipping.ship`)."""
    from .shipping import ship
    from .source import ReplwireDataSource

    ship(spark)  # before registering: a data source takes the session's Python files as they are now

    spark.dataSource.register(ReplwireDataSource)
