"""Build replwire's optional compiled codec; everything else about the package is in pyproject.toml.

The C source of the extension ``replwire.codec.wire._compiled`` is generated from the declarations at build
time (``python -m replwire.codec.wire.gen.c_module``, run from this checkout; never committed) and compiled
with the compiler setuptools finds.  When generating or compiling fails, the build warns and goes on without
the extension: replwire then runs its pure-Python codec, with the same results.  ``REPLWIRE_BUILD_C=1``
makes such a failure fatal (CI sets it, so that a broken compiled codec cannot pass unnoticed).
"""

from __future__ import annotations

import os
import subprocess
import sys
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


class BuildCompiled(build_ext):
    """build_ext that generates the C source first and treats a failure as optional."""

    def run(self) -> None:
        try:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "namespace"),
                                                                os.environ.get("PYTHONPATH", "")]),
                   "REPLWIRE_IMPL": "python"}  # the generator imports the codec: not the old extension
            subprocess.run([sys.executable, "-m", "replwire.codec.wire.gen.c_module", str(ROOT / SOURCE)],
                           check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
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
