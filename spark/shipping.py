"""Makes the driver's replwire, its compiled codec included, importable on the executors of a Spark cluster.

Spark's Python workers unpickle replwire's functions and data sources by importing ``replwire``; on a
cluster's machines it may be missing, or another version.  :func:`ship` packs the package the driver runs
(``replwire.schema``, ``replwire.codec``, ``replwire.spark``, from wherever they are installed: their sources,
data files and built extension modules, the compiled codec :mod:`replwire.codec.wire._compiled` among them)
into a zip and adds it with ``SparkContext.addArchive("<zip>#replwire")``.  Every executor fetches it before
its first task and unpacks it into a directory ``replwire`` of its working directory -- the root of
``SparkFiles`` -- which PySpark's worker puts on ``sys.path`` ahead of the executor Python's own packages:
``replwire`` (a namespace package) is found there, and every task runs the driver's code.  replwire's
dependencies (construct, pyarrow, psycopg for typed values) are not shipped: the executors' Python must have
them.  Local masters run the driver's installed package and get nothing.

Why an archive the executors unpack, and not the alternatives:

* a zip on ``sys.path`` (``addPyFile``, what replwire shipped before) cannot carry the compiled codec:
  Python's zip importer loads no extension module, and :mod:`replwire.codec.wire.fast` accepts the
  extension only after hashing the codec's source files (:mod:`replwire.codec.wire.gen.fingerprint`),
  which inside a zip are no files;
* unpacked by Spark itself, the archive is plain files: the extension loads as from site-packages, and the
  source files it was built from are shipped unchanged beside it, so its fingerprint check passes.  It
  needs nothing on the executors -- no pip, no compiler, no writable environment -- and costs one download
  of about a megabyte per executor and application, then nothing per task;
* a wheel installed on each executor would need pip and a writable environment there, would outlive the job
  (later applications would import it), and would carry the same extension, built for the driver's
  platform, as the archive does;
* a build on first use would need a C compiler and Python's headers on every executor (cluster images seldom
  have them), cost seconds per executor and application, and race between an executor's Python workers.

The extension is built for the driver's platform and Python; Spark already demands the driver's Python minor
version of the executors, and a cluster's machines commonly share the platform.  Where they do not (an
executor of another architecture or C library), the import system itself does not see the extension -- its
file name carries its ABI tag, e.g. ``_compiled.cpython-311-x86_64-linux-gnu.so`` -- and the executor runs
the Python codec, with the same results; where the extension is there but does not load or is refused, the
same.  Either way it says so (below).  ``REPLWIRE_IMPL=python`` in an executor's environment
(``spark.executorEnv.REPLWIRE_IMPL``) chooses the Python codec there too.

Which codec each executor runs is said twice.  The first import of the shipped ``replwire.spark`` on an
executor (every replwire task imports it) writes one line to the executor's stderr -- the worker's log
``work/<app>/<executor>/stderr`` on a standalone cluster, the *stderr* link of the executor in Spark's UI::

    replwire: executor 1 on host-2 runs the compiled codec (cpython 3.11.7, linux-x86_64)
    replwire: executor 0 on host-3 runs the Python codec (the same results, slower): the compiled codec
    shipped (_compiled.cpython-311-x86_64-linux-gnu.so) is built for linux-x86_64, Python 3.11.7; ...

and the jobs (:mod:`replwire.spark.jobs`) collect from their tasks which codec each executor ran them with
(:func:`codec_accumulator`, :func:`note_codec`), which ``replwire spark`` prints, e.g. ``executors: compiled
codec on 2 of 2``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import platform
import shutil
import socket
import sys
import sysconfig
import tempfile
import urllib.parse
import weakref
import zipfile
from collections.abc import Callable
from typing import Any

__all__ = ["codec_accumulator", "codec_status", "describe_executors", "note_codec", "ship"]

_PACKAGES = ("replwire.schema", "replwire.codec", "replwire.spark")
_shipped: weakref.WeakSet[Any] = weakref.WeakSet()  # the SparkContexts given the archive
#: The file the archive adds to ``replwire/spark``: what the driver shipped (its Python and platform).
SHIPPED = "_shipped.json"
_ANNOUNCED = ".replwire-codec"  # in an executor's working directory: its line is written
_SKIPPED = ("__pycache__",)


def _files(root: str) -> list[tuple[str, str]]:
    """``(path, path inside root)`` of the files of a package directory worth shipping: not byte code, not
    hidden files, not object files."""
    found = []
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(f for f in folders if f not in _SKIPPED and not f.startswith("."))
        for file in sorted(files):
            if not file.startswith(".") and not file.endswith((".pyc", ".o")):
                path = os.path.join(folder, file)
                found.append((path, os.path.relpath(path, root)))
    return found


def _driver() -> dict[str, Any]:
    return {"python": platform.python_version(), "implementation": sys.implementation.name,
            "platform": sysconfig.get_platform(), "suffixes": importlib.machinery.EXTENSION_SUFFIXES,
            "host": socket.gethostname()}


def ship(spark: Any) -> None:
    """Add an archive of this replwire, its compiled codec included, to the executors of ``spark`` (a
    SparkSession) unless its master is a local one; once per SparkContext.  The archive is written to a
    temporary directory, removed when the SparkContext is collected or at exit."""
    context = spark.sparkContext
    if context.master.startswith("local") or context in _shipped:
        return
    directory = tempfile.mkdtemp(prefix="replwire-ship-")
    weakref.finalize(context, shutil.rmtree, directory, True)
    path = os.path.join(directory, "replwire.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in _PACKAGES:  # replwire is a namespace package: its portions' directories, no __init__.py
            inside_replwire = name.split(".", 1)[1]
            for root in importlib.import_module(name).__path__:
                for file, inside in _files(root):
                    archive.write(file, os.path.join(inside_replwire, inside))
        archive.writestr(f"spark/{SHIPPED}", json.dumps(_driver()))
    context.addArchive(f"{path}#replwire")
    _shipped.add(context)


# ---------------------------------------------------------------------------------------------------------
# on the executors


def _why_not_compiled(directory: str, load: Callable[[], Any]) -> str:
    """Why the codec of this process is the Python one, when ``REPLWIRE_IMPL`` did not ask for it:
    ``directory`` is the codec's (``replwire/codec/wire``), ``load()`` imports the compiled codec."""
    built = sorted(n for n in os.listdir(directory)
                   if n.startswith("_compiled.") and n.endswith((".so", ".pyd")))
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    try:
        module = load()
    except ImportError as error:
        if built and not any(n == f"_compiled{s}" for n in built for s in suffixes):
            driver = _shipped_by()
            return (f"the compiled codec shipped ({', '.join(built)}) is built for "
                    f"{driver.get('platform', 'another platform')}, Python {driver.get('python', '?')}; this "
                    f"executor's Python ({platform.python_version()}, {sysconfig.get_platform()}) loads "
                    f"'_compiled{suffixes[0]}'")
        if not built:
            return "the driver's replwire has no compiled codec (built without a C compiler?)"
        return f"the compiled codec does not load here ({error})"
    from replwire.codec.wire.gen.fingerprint import fingerprint

    if getattr(module, "FINGERPRINT", None) != fingerprint():
        return "the compiled codec is stale (its fingerprint is not the shipped sources')"
    return "the compiled codec does not fit the message classes"


def codec_status() -> tuple[str, str]:
    """Which codec this process runs: ``("c", "")``, or ``("python", why)``."""
    from replwire.codec.wire import fast

    if fast.IMPL == "c":
        return "c", ""
    if os.environ.get(fast.ENVIRONMENT, "").strip().lower() == "python":
        return "python", f"{fast.ENVIRONMENT}=python in the executor's environment"
    return "python", _why_not_compiled(os.path.dirname(fast.__file__),
                                       lambda: importlib.import_module("replwire.codec.wire._compiled"))


def _executor() -> str:
    """This executor, as Spark's UI names it where it can tell (standalone and YARN executors know their
    stderr page, which names them), else by host and working directory."""
    host = socket.gethostname()
    query = urllib.parse.urlparse(os.environ.get("SPARK_LOG_URL_STDERR", "")).query
    number = urllib.parse.parse_qs(query).get("executorId")
    if number:
        return f"executor {number[0]} on {host}"
    return f"executor on {host} in {os.getcwd()}"


def _shipped_by() -> dict[str, Any]:
    path = os.path.join(os.path.dirname(__file__), SHIPPED)
    try:
        with open(path, encoding="utf-8") as handle:
            found: dict[str, Any] = json.load(handle)
            return found
    except (OSError, ValueError):
        return {}


def _line(status: tuple[str, str]) -> str:
    impl, why = status
    if impl == "c":
        return (f"replwire: {_executor()} runs the compiled codec ({sys.implementation.name} "
                f"{platform.python_version()}, {sysconfig.get_platform()})")
    return f"replwire: {_executor()} runs the Python codec (the same results, slower): {why}"


def announce() -> None:
    """On an executor running the copy :func:`ship` sent it, write once (per executor: the first Python
    worker to get here) which codec it runs to stderr, the executor's log.  Nothing elsewhere: not on the
    driver (where Spark's planner may import the same copy), not under a local master.  An executor is told
    from the planner by what Spark gives executors only: ``SPARK_LOG_URL_STDERR`` (standalone, YARN) or
    ``SPARK_EXECUTOR_ID`` (Kubernetes) in its environment."""
    if not os.path.exists(os.path.join(os.path.dirname(__file__), SHIPPED)):
        return  # not the shipped copy
    if "SPARK_LOG_URL_STDERR" not in os.environ and os.environ.get("SPARK_EXECUTOR_ID") is None:
        return  # not an executor that has a log of its own (the driver's planner)
    try:
        os.close(os.open(_ANNOUNCED, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    except OSError:
        pass  # a working directory we cannot write to: say it from every Python worker
    try:
        line = _line(codec_status())
    except Exception as error:  # never let the report break the task
        line = f"replwire: {_executor()}: cannot tell which codec runs ({error!r})"
    print(line, file=sys.stderr, flush=True)


class _Merge:
    """The accumulator of :func:`codec_accumulator`: dicts, merged."""

    def zero(self, value: dict[str, Any]) -> dict[str, Any]:
        return {}

    def addInPlace(self, value: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:  # noqa: N802 (Spark's)
        value.update(other)
        return value


def codec_accumulator(spark: Any) -> Any:
    """An accumulator for the tasks of a job to say, with :func:`note_codec`, which codec their executor
    runs; its ``value`` after the job: executor -> ``(impl, why)`` (see :func:`codec_status`)."""
    return spark.sparkContext.accumulator({}, _Merge())


def note_codec(accumulator: Any) -> None:
    """In a task: add this executor's codec to ``accumulator`` (of :func:`codec_accumulator`)."""
    accumulator.add({_executor(): codec_status()})


def describe_executors(codecs: dict[str, tuple[str, str]]) -> str:
    """``compiled codec on 2 of 2``, or which ran the Python codec and why."""
    compiled = sum(impl == "c" for impl, _ in codecs.values())
    text = f"compiled codec on {compiled} of {len(codecs)}"
    python = sorted((name, why) for name, (impl, why) in codecs.items() if impl != "c")
    if python:
        text += "; the Python codec on " + "; ".join(f"{name} ({why})" for name, why in python)
    return text
