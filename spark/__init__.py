"""replwire on Apache Spark: captured change streams as DataFrames (see the Spark guide in the docs).

>>> from pyspark.sql import SparkSession
>>> from replwire.spark import register
>>> spark = SparkSession.builder.master("local[*]").getOrCreate()  # doctest: +SKIP
>>> register(spark)  # doctest: +SKIP
>>> spark.read.format("replwire").load("capture.rwc").show()  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``replwire`` data sources (batch and streaming) with a SparkSession."""
    from .source import ReplwireDataSource

    spark.dataSource.register(ReplwireDataSource)
