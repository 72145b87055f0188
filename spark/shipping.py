"""Makes the driver's replwire importable on the executors of a Spark cluster.

Spark's Python workers unpickle replwire's functions and data sources by importing ``replwire``; on a
cluster's machines it may be missing, or another version.  :func:`ship` zips the package the driver runs
(``replwire.schema``, ``replwire.codec``, ``replwire.spark``, from wherever they are installed) and adds the
zip with ``SparkContext.addPyFile``: Spark copies it to every executor and puts it ahead of the executor
Python's own packages, so every task runs the driver's code.  replwire's dependencies (construct, pyarrow,
psycopg for typed values) are not shipped: the executors' Python must have them.  Local masters run the
driver's installed package and need no zip.

The compiled codec is not shipped either, so executors run the Python codec: Python's zip importer loads
no extension module, and :mod:`replwire.codec.wire.fast` accepts the extension only after hashing the
codec's source files (:mod:`replwire.codec.wire.gen.fingerprint`), which inside a zip are no files.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import weakref
import zipfile
from typing import Any

__all__ = ["ship"]

_PACKAGES = ("replwire.schema", "replwire.codec", "replwire.spark")
_shipped: weakref.WeakSet[Any] = weakref.WeakSet()  # the SparkContexts given the zip


def ship(spark: Any) -> None:
    """Add a zip of this replwire to the executors of ``spark`` (a SparkSession) unless its master is a local
    one; once per SparkContext.  The zip is written to a temporary directory, removed when the SparkContext
    is collected or at exit."""
    context = spark.sparkContext
    if context.master.startswith("local") or context in _shipped:
        return
    directory = tempfile.mkdtemp(prefix="replwire-ship-")
    weakref.finalize(context, shutil.rmtree, directory, True)
    path = os.path.join(directory, "replwire.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("replwire/", b"")  # the namespace package: a directory entry, no __init__.py
        for name in _PACKAGES:
            for root in importlib.import_module(name).__path__:
                for folder, folders, files in os.walk(root):
                    folders[:] = sorted(f for f in folders if f != "__pycache__")
                    for file in sorted(files):
                        if file.endswith((".py", ".typed")):
                            inside = os.path.relpath(os.path.join(folder, file), root)
                            archive.write(os.path.join(folder, file),
                                          os.path.join(*name.split("."), inside))
    context.addPyFile(path)
    _shipped.add(context)
