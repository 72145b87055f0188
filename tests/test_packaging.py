"""The wheel holds exactly the ``replwire`` namespace, and what it holds works on its own."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("wheel")
    # setuptools builds in the checkout's build/ and copies what it finds there into the wheel: modules an
    # earlier build left behind (renamed or removed since) would come along, so its build trees go first
    for stale in ROOT.glob("build/lib.*"):
        shutil.rmtree(stale)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(out), str(ROOT)], check=True, cwd=out)
    (path,) = out.glob("replwire-*.whl")
    return path


def test_wheel_holds_only_the_replwire_namespace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert top - dist_info == {"replwire"}
    packages = {pathlib.PurePosixPath(n).parent.as_posix() for n in names if n.endswith(".py")}
    assert packages == {"replwire/schema", "replwire/spark", "replwire/codec", "replwire/codec/wire",
                        "replwire/codec/wire/gen", "replwire/codec/stream", "replwire/codec/split",
                        "replwire/codec/io", "replwire/codec/cli", "replwire/codec/testing", "replwire/codec/docs",
                        "replwire/codec/serve"}
    for required in ("replwire/schema/__init__.py", "replwire/schema/dml.py", "replwire/codec/__init__.py",
                     "replwire/codec/cli/__init__.py", "replwire/codec/cli/__main__.py",
                     "replwire/codec/wire/fast.py", "replwire/codec/py.typed", "replwire/schema/py.typed",
                     "replwire/spark/source.py", "replwire/spark/py.typed"):
        assert required in names
    assert not any(n.startswith(("tests/", "schema/", "codec/", "spark/")) for n in names)
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt")))
    assert b"replwire = replwire.codec.cli:main" in entry_points


def test_wheel_contents_work_alone(wheel, tmp_path):
    zipfile.ZipFile(wheel).extractall(tmp_path)
    code = ("import replwire.codec as c, replwire.schema as s; print(c.__file__); "
            "print(c.parse(bytes.fromhex('45'), proto_version=2, in_stream=True)); "
            "from replwire.codec.wire import fast; print(fast.IMPL, fast._COMPILED.__file__)")
    # (the compiled codec not forced off, as REPLWIRE_IMPL=python does for a run of the suite on the Python codec)
    env = {k: v for k, v in os.environ.items() if k != "REPLWIRE_IMPL"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**env, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    first, second, third = result.stdout.splitlines()
    assert first.startswith(str(tmp_path))
    assert second == "StreamStop()"
    # the wheel holds the compiled codec, built from the declarations it holds (its fingerprint matches)
    impl, extension = third.split(" ", 1)
    assert impl == "c" and extension.startswith(str(tmp_path / "replwire" / "codec" / "wire" / "_compiled."))
    assert not any(name.endswith("_compiled.c") for name in zipfile.ZipFile(wheel).namelist())


def test_console_script_is_installed():
    script = shutil.which("replwire", path=os.path.dirname(sys.executable))
    assert script, "no replwire console script beside the interpreter"
    result = subprocess.run([script, "--version"], capture_output=True, text=True, check=True)
    assert result.stdout.startswith("replwire, version ")
