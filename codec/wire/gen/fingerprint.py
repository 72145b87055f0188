"""The fingerprint of what the compiled codec is generated from, so that a stale extension is refused.

The C source of :mod:`replwire.codec.wire._compiled` is a function of the declarations (``schema/``), the
walker, the message classes, the generators and the hand-written C twins of Python modules; the fingerprint
is a hash of those files' contents.  The
generator writes it into the C source; :mod:`replwire.codec.wire.fast` compares the built extension's with
the installed files' at import and uses the Python codec when they differ (an extension built before the
declarations or the generator changed).  Only the standard library is imported here: it runs at every
import of the codec.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["fingerprint"]

_CODEC = Path(__file__).resolve().parent.parent.parent  # replwire/codec
_PACKAGE = _CODEC.parent  # replwire


def sources() -> list[Path]:
    """The files the compiled codec is generated from, in a fixed order."""
    files = sorted((_PACKAGE / "schema").glob("*.py")) + [_CODEC / "walker.py", _CODEC / "messages.py",
                                                          _CODEC / "scalars.py"]
    twins = sorted(p for p in _CODEC.rglob("*.c") if p.name != "_compiled.c")  # the C twins of Python modules
    return files + sorted((_CODEC / "wire" / "gen").glob("*.py")) + twins


def fingerprint() -> str:
    """The hash of :func:`sources`: their names (relative to the package) and contents."""
    digest = hashlib.sha256()
    for path in sources():
        digest.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]
