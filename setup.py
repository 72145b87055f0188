"""Build replwire's optional compiled codec; everything else about the package is in pyproject.toml.

The C source of the extension ``replwire.codec.wire._compiled`` is generated from the declarations at build
time (``python -m replwire.codec.wire.gen.c_module``, run from this checkout; never committed) and compiled
with the compiler setuptools finds.  When generating or compiling fails, the build warns and goes on without
the extension: replwire then runs its pure-Python codec, with the same results.  ``REPLWIRE_BUILD_C=1``
makes such a failure fatal (CI sets it, so that a broken compiled codec cannot pass unnoticed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
#: the generated C source (in .gitignore), relative to the checkout as setuptools wants it
SOURCE = "codec/wire/_compiled.c"
STRICT = os.environ.get("REPLWIRE_BUILD_C", "") == "1"


def warn(error: BaseException) -> None:
    line = "*" * 78
    print(f"\n{line}\nreplwire: WARNING: the compiled codec was not built ({error}).\n"
          "replwire will use its pure-Python codec: the same results, slower.  To build it, install a C\n"
          "compiler and the Python headers (Debian: apt-get install gcc python3-dev), then reinstall;\n"
          f"REPLWIRE_BUILD_C=1 makes this failure fatal.\n{line}\n", file=sys.stderr, flush=True)


def generate() -> None:
    """Write the C source with the generator of this source tree, importable as ``replwire`` from a
    temporary directory that links the package's directories under their installed names (a checkout
    and an sdist alike)."""
    with tempfile.TemporaryDirectory(prefix="replwire-build-") as scratch:
        package = Path(scratch) / "replwire"
        package.mkdir()
        for name in ("schema", "codec", "spark"):
            try:
                (package / name).symlink_to(ROOT / name, target_is_directory=True)
            except OSError:  # no symlinks here (Windows without the privilege): a copy
                shutil.copytree(ROOT / name, package / name)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([scratch, os.environ.get("PYTHONPATH", "")]),
               "REPLWIRE_IMPL": "python"}  # the generator imports the codec: not an old extension
        subprocess.run([sys.executable, "-m", "replwire.codec.wire.gen.c_module", str(ROOT / SOURCE)],
                       check=True, env=env, cwd=scratch, stdout=subprocess.DEVNULL)


class BuildCompiled(build_ext):
    """build_ext that generates the C source first and treats a failure as optional."""

    def run(self) -> None:
        try:
            generate()
            super().run()
        except Exception as error:  # noqa: BLE001 - any failure: no extension, unless it must be built
            if STRICT:
                raise
            warn(error)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:  # noqa: BLE001
            if STRICT:
                raise
            warn(error)


setup(
    ext_modules=[Extension("replwire.codec.wire._compiled", [SOURCE], optional=not STRICT)],
    cmdclass={"build_ext": BuildCompiled},
)
