"""Rotation: a capture that writes its stream into a series of files, *segments*, closing one and going on in
the next once it is big or old enough.

Strategy: with rotation, ``--out app.rwcap`` names no file but the series ``app.000001.rwcap``,
``app.000002.rwcap``, ... beside it (:func:`segment_path`: the number goes before the last suffix).  Each
segment's header says its number and the stream position it starts at
(:data:`~replwire.schema.capture.SEGMENT`), and its first record is a ``SlotConfirmed`` of that position: the
segment before it reaches it, so a reader of the series sees a missing segment as it would a missing file of
any stream.  The capture rotates only between transactions (nothing in flight, streamed transactions
included), after the old segment is durable and its last position acknowledged (:class:`Rotation`).

A restarted capture continues in the newest segment, cut to the slot's confirmed position as any capture
file is (:func:`resume_segment`).  The acknowledgement sent before a rotation can be lost with the process
(a SIGKILL): then the slot stands before the newest segment's start, and the newest segment holds only
what the server sends again.  It is removed, and the capture continues in the one before it, cut at the
slot's position: nothing is doubled, nothing lost.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..scalars import LSN
from .capture_file import CaptureFileError, read_capture
from .connection import CaptureError

__all__ = ["Rotation", "parse_duration", "resume_segment", "segment_number", "segment_path", "segments"]

#: How many digits a segment's number has at least (more once the series passes 999999).
DIGITS = 6
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """A DURATION's seconds: ``90`` or ``90s``, ``15m``, ``1h``, ``1d`` (also ``1.5h``); ``ValueError`` if
    it is none or not positive."""
    match = re.fullmatch(r"(\d{1,9}(?:\.\d{1,6})?) ?([smhdSMHD]?)", text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 30s, 15m, 1h, 1d)")
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be more than 0")
    return seconds


@dataclass(frozen=True)
class Rotation:
    """When a capture goes on in a new segment: once the current one holds at least ``size`` bytes, or was
    opened ``age`` seconds ago by this run and holds a transaction more since (either may be ``None``)."""

    size: int | None = None
    age: float | None = None

    def __post_init__(self) -> None:
        if self.size is None and self.age is None:
            raise ValueError("a rotation needs a size or an age")
        if self.size is not None and self.size < 1:
            raise ValueError(f"a rotation size must be at least 1 byte, not {self.size}")
        if self.age is not None and self.age <= 0:
            raise ValueError(f"a rotation age must be more than 0 seconds, not {self.age}")

    def due(self, size: int, age: float, grown: bool) -> bool:
        """Whether a segment of ``size`` bytes, opened ``age`` seconds ago, is to be closed (``grown``: it holds
        something completed since it was opened)."""
        return (self.size is not None and size >= self.size) or (self.age is not None and age >= self.age
                                                                  and grown)


def _parts(pattern: str | os.PathLike[str]) -> tuple[str, str]:
    path = os.fspath(pattern)
    base, suffix = os.path.splitext(path)
    return (base, suffix) if os.path.basename(base) else (path, "")


def segment_path(pattern: str | os.PathLike[str], number: int) -> str:
    """The path of segment ``number`` of the series ``pattern`` names: ``app.rwcap`` -> ``app.000001.rwcap``
    (``app`` -> ``app.000001``)."""
    base, suffix = _parts(pattern)
    return f"{base}.{number:0{DIGITS}d}{suffix}"


def segment_number(pattern: str | os.PathLike[str], path: str | os.PathLike[str]) -> int | None:
    """The number of the segment ``path`` of the series ``pattern``, or ``None`` if it is not one of them."""
    base, suffix = _parts(pattern)
    match = re.fullmatch(re.escape(os.path.basename(base)) + rf"\.(\d{{{DIGITS},}})" + re.escape(suffix),
                         os.path.basename(os.fspath(path)))
    return None if match is None else int(match.group(1))


def segments(pattern: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """The segments of the series ``pattern`` names that exist, as ``(number, path)``, by number."""
    base, _ = _parts(pattern)
    directory = os.path.dirname(base) or "."
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        number = segment_number(pattern, name)
        if number is not None and number > 0:
            found.append((number, os.path.join(os.path.dirname(base), name)))
    return sorted(found)


def check_pattern(pattern: str | os.PathLike[str]) -> str:
    """The segment a capture with rotation into ``pattern`` looks at first: the newest that exists, else
    segment 1.  Refused (:class:`CaptureError`): a capture file at ``pattern`` itself (one written without
    rotation, which the series would not continue)."""
    path = os.fspath(pattern)
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        raise CaptureError(f"{path} exists: with --rotate-size or --rotate-time the capture writes the segments "
                           f"{os.path.basename(segment_path(path, 1))}, {os.path.basename(segment_path(path, 2))}, "
                           f"... beside it, and never {path} itself; resume that file without rotation, or name "
                           "another --out (decode and the Spark jobs read that file together with the segments "
                           "as one stream)")
    found = segments(path)
    return found[-1][1] if found else segment_path(path, 1)


def resume_segment(pattern: str | os.PathLike[str], confirmed: LSN) -> tuple[int, str, list[str]]:
    """The segment to continue the series ``pattern`` in, from the slot's confirmed position ``confirmed``:
    ``(number, path, removed)``.  The newest segment, unless it starts after ``confirmed`` (the
    acknowledgement of its start was lost): it then holds only what the server sends again, and is removed,
    and the one before it is looked at in turn.  A missing segment before one that must go is refused
    (:class:`CaptureError`): what the slot will send again from ``confirmed`` would be in no file.  ``removed``:
    the paths of the segments removed."""
    found = segments(pattern)
    removed: list[str] = []
    while found:
        number, path = found[-1]
        try:
            with read_capture(path) as reader:
                start = reader.header.segment_start
        except CaptureFileError as error:
            raise CaptureError(f"{error}: cannot resume the segment") from None
        if start is None or start <= confirmed:
            return number, path, removed
        if number > 1 and (len(found) < 2 or found[-2][0] != number - 1):
            raise CaptureError(f"the slot's confirmed position {confirmed} is before {path} starts ({start}), "
                               f"and the segment before it, {segment_path(pattern, number - 1)}, which holds "
                               "that position, is missing: put it back to resume (or start a new series with "
                               "another --out)")
        os.unlink(path)  # (all it holds comes after confirmed: the server sends it again)
        _sync_directory(path)
        removed.append(path)
        found.pop()
    return 1, segment_path(pattern, 1), removed  # (none yet, or segment 1 started past the slot: begun again)


def _sync_directory(path: str) -> None:
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
