"""Explain one message byte by byte: which field every byte belongs to, and what it means.

Strategy: parse through the reference declarations with a ``replwire.schema.fields.Trace``, which
records where each field started and ended; then cut the message into segments that cover every byte
exactly once -- a field's own bytes, and for arrays and marked records the header bytes (marker, count)
that belong to the container rather than to any element.  Values are shown the way the message classes
show them (LSNs as ``X/X``, timestamps in ISO 8601).  The reference docs' worked examples are made with
it, and users call [explain][replwire.codec.wire.explain.explain] to see what a message's bytes mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...schema.encodings import UTF8
from ...schema.fields import FieldMeta, Trace
from ...schema.wire_error import path_text
from ..messages import WireMessage
from ..scalars import LSN, Timestamp
from . import reference

__all__ = ["Explanation", "Segment", "explain"]


@dataclass(frozen=True)
class Segment:
    """A run of bytes of the message: ``data[start:end]`` belongs to ``path``.

    ``header`` is True for the bytes of a container that no element owns (a marker byte, a count).
    """

    path: str
    start: int
    end: int
    raw: bytes
    value: str
    meta: FieldMeta | None
    header: bool = False


@dataclass(frozen=True)
class Explanation:
    """A parsed message and the segments that cover its bytes in order."""

    message: WireMessage
    data: bytes
    segments: tuple[Segment, ...]

    def text(self, width: int = 16) -> str:
        """A plain-text table: offset, hex, field, value."""
        rows = []
        for seg in self.segments:
            hex_bytes = seg.raw.hex(" ")
            if len(seg.raw) > width:
                hex_bytes = seg.raw[:width].hex(" ") + f" … (+{len(seg.raw) - width} bytes)"
            rows.append((seg.start, hex_bytes, seg.path, seg.value))
        hex_width = max((len(r[1]) for r in rows), default=0)
        path_width = max((len(r[2]) for r in rows), default=0)
        lines = [f"{type(self.message).__name__} ({len(self.data)} bytes)"]
        lines += [f"  {start:>5}  {hex_bytes:<{hex_width}}  {path:<{path_width}}  {value}"
                  for start, hex_bytes, path, value in rows]
        return "\n".join(lines)


def _show(value: Any, meta: FieldMeta | None) -> str:
    if value is None:
        return "absent"
    kind = meta.value if meta else None
    if kind == "lsn":
        return str(LSN(value))
    if kind == "timestamp":
        return f"{value} = {Timestamp(value)}"
    if kind in ("text", "char", "tag"):
        return repr(value)
    if kind == "bytes":
        shown = bytes(value[:24])
        text = shown.decode("utf-8", "replace") if all(32 <= b < 127 for b in shown) else shown.hex()
        return f"{len(value)} byte{'s' if len(value) != 1 else ''}: {text}{'…' if len(value) > 24 else ''}"
    if isinstance(value, list):
        return f"{len(value)} item{'s' if len(value) != 1 else ''}"
    return str(value)


def explain(data: bytes, *, proto_version: int | None = None, in_stream: bool = False,
            sender: str | None = None, encoding: str = UTF8) -> Explanation:
    """Explain one pgoutput message (``proto_version`` given, its Strings in ``encoding``) or one envelope
    frame (``sender`` given).

    Raises [DecodeError][replwire.codec.DecodeError] exactly as parsing does.
    """
    data = reference.as_bytes(data)
    trace = Trace()
    if sender is not None:
        cls = reference.envelope_class(data, sender)
        message = reference.parse_with(cls, data, proto_version=None, in_stream=False, trace=trace)
    else:
        codec = reference.check_context(proto_version, in_stream, encoding)
        assert proto_version is not None  # check_context refused anything but an int from 1 up
        cls = reference.logical_class(data, proto_version)
        message = reference.parse_with(cls, data, proto_version=proto_version, in_stream=in_stream, encoding=codec,
                                       trace=trace)
    spans = [s for s in trace.spans if s[2] > s[1] or s[3] is None]
    segments = []
    for path, start, end, value, meta in spans:
        if end <= start:
            continue
        children = sorted((s[1], s[2]) for s in spans
                          if len(s[0]) > len(path) and s[0][:len(path)] == path and s[2] > s[1])
        if not children:
            segments.append(Segment(path_text(path), start, end, data[start:end], _show(value, meta), meta))
            continue
        # bytes of the container that no element covers: markers and counts
        position = start
        for child_start, child_end in children:
            if child_start > position:
                raw = data[position:child_start]
                segments.append(Segment(path_text(path), position, child_start, raw, _header(raw, value),
                                        meta, header=True))
            position = max(position, child_end)
    segments.sort(key=lambda s: s.start)
    return Explanation(message, data, tuple(segments))


def _header(raw: bytes, value: Any) -> str:
    count = len(value) if isinstance(value, list) else None
    parts = []
    if len(raw) in (1, 3, 5) and chr(raw[0]).isalpha():
        parts.append(f"marker {chr(raw[0])!r}")
        raw = raw[1:]
    if raw and count is not None:
        parts.append(f"count {int.from_bytes(raw, 'big')}")
    return ", ".join(parts) or raw.hex()
