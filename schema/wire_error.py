"""The one failure of the declarations, :class:`WireError`, and where it happened.

Strategy: every check of a declaration -- the construct classes of :mod:`replwire.schema.constructs`, a
String's encoding (:mod:`replwire.schema.encodings`), and the codec's own checks (the interpreter, the message
classes' value checks) -- raises :class:`WireError` with a plain-words ``reason``.  Every field and array on
the way out records its name, index and byte offset on the exception (:func:`annotate`, read back by
:func:`location`) so that ``replwire.codec`` can say *where* and *what*: one kind of failure on its way out and
one way to read where it happened.  This module imports construct only.
"""

from __future__ import annotations

from collections.abc import Iterable

from construct import ConstructError

__all__ = ["WireError", "annotate", "location", "path_text"]


class WireError(ConstructError):
    """A check of a replwire declaration failed; ``reason`` says what, in plain words."""

    def __init__(self, reason: str, path: str | None = None) -> None:
        super().__init__(reason, path=path)
        self.reason = reason


def annotate(error: BaseException, *, name: str | None = None, index: int | None = None,
             offset: int | None = None) -> None:
    """Record one step of the error's location on the exception, innermost first.

    ``replwire_path`` is built from the inside out (the innermost field is recorded first and every
    enclosing field or array index is put in front of it); ``replwire_offset`` keeps the innermost offset.
    """
    path = getattr(error, "replwire_path", None)
    if path is None:
        path = []
        error.replwire_path = path  # type: ignore[attr-defined]
    if index is not None:
        path.insert(0, f"[{index}]")
    if name is not None:
        path.insert(0, name)
    if offset is not None and getattr(error, "replwire_offset", None) is None:
        error.replwire_offset = offset  # type: ignore[attr-defined]


def location(error: BaseException) -> tuple[int | None, str | None]:
    """What :func:`annotate` recorded on ``error``: the innermost byte offset (or ``None``) and the field
    path as errors print it (or ``None`` when the failure is not inside a field)."""
    return getattr(error, "replwire_offset", None), path_text(getattr(error, "replwire_path", None) or ()) or None


def path_text(parts: Iterable[str]) -> str:
    """A field path as text: names joined by dots, array indexes attached (``columns[1].type_id``)."""
    return ".".join(parts).replace(".[", "[")
