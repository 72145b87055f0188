"""What replwire ships to a cluster's executors, and how an executor says which codec it runs -- the parts
that need no cluster (tests/spark/test_spark_cli.py runs the shipped archive on one)."""

from __future__ import annotations

import importlib.machinery
import json
import os
import zipfile

from replwire.codec.wire import fast
from replwire.codec.wire.gen.fingerprint import sources
from replwire.spark import shipping

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


class FakeContext:
    master = "spark://head:7077"

    def __init__(self):
        self.archives = []

    def addArchive(self, path):  # noqa: N802 (Spark's)
        self.archives.append(path)


class FakeSession:
    def __init__(self):
        self.sparkContext = FakeContext()


def test_the_archive_holds_the_compiled_codec_beside_the_sources_it_was_built_from():
    session = FakeSession()
    shipping.ship(session)
    shipping.ship(session)  # once per context
    (added,) = session.sparkContext.archives
    path, name = added.split("#")
    assert name == "replwire"  # unpacked by the executors into ./replwire, on their Python workers' sys.path
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        # every file the fingerprint hashes, unchanged, so the extension's fingerprint check passes there
        package = os.path.dirname(os.path.dirname(fast.__file__))  # replwire/codec
        for source in sources():
            inside = os.path.relpath(source, os.path.dirname(package)).replace(os.sep, "/")
            assert archive.read(inside) == source.read_bytes(), inside
        driver = json.loads(archive.read(f"spark/{shipping.SHIPPED}"))
    if fast.IMPL == "c":  # the extension the driver runs
        assert f"codec/wire/{os.path.basename(fast.COMPILED.__file__)}" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert {"spark/__init__.py", "spark/log4j2.properties", "schema/py.typed"} <= names
    assert driver["suffixes"] == importlib.machinery.EXTENSION_SUFFIXES


def test_why_an_executor_runs_the_python_codec(tmp_path):
    def missing():
        raise ImportError("No module named 'replwire.codec.wire._compiled'")

    # built for another platform: this Python does not even look at the file
    other = tmp_path / "other"
    other.mkdir()
    (other / "_compiled.cpython-311-aarch64-linux-gnu.so").write_bytes(b"")
    (other / "_compiled.c").write_text("")
    why = shipping._why_not_compiled(str(other), missing)
    assert why.startswith("the compiled codec shipped (_compiled.cpython-311-aarch64-linux-gnu.so) is built for ")
    assert f"loads '_compiled{SUFFIX}'" in why
    # not built at all on the driver
    none = tmp_path / "none"
    none.mkdir()
    assert "has no compiled codec" in shipping._why_not_compiled(str(none), missing)
    # there, for this Python, but it does not load
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / f"_compiled{SUFFIX}").write_bytes(b"not an ELF file")

    def fails():
        raise ImportError("invalid ELF header")

    why = shipping._why_not_compiled(str(broken), fails)
    assert why == "the compiled codec does not load here (invalid ELF header)"


def test_executors_described():
    assert shipping.describe_executors({"executor 0 on a": ("c", ""), "executor 1 on b": ("c", "")}) == \
        "compiled codec on 2 of 2"
    assert shipping.describe_executors({"executor 0 on a": ("c", ""), "executor 1 on b": ("python", "why")}) == \
        "compiled codec on 1 of 2; the Python codec on executor 1 on b (why)"


def test_this_process_says_its_codec(monkeypatch):
    impl, why = shipping.codec_status()
    assert impl == fast.IMPL and (why == "") == (impl == "c")
    # announce() says nothing outside a shipped copy (here: the installed package, on no executor)
    monkeypatch.setenv("SPARK_EXECUTOR_ID", "7")
    shipping.announce()
    assert not os.path.exists(shipping._ANNOUNCED)
