"""Load the hand-assembled golden vectors in ``tests/vectors/messages.json``.

Each vector's ``wire`` is a list of fields, hex first and a note after it; ``expect`` describes the
message in plain JSON (LSNs as ``X/X`` text, bytes as hex, tuple columns as ``[kind]``/``[kind, hex]``).
"""

from __future__ import annotations

import json
import pathlib
import typing
from dataclasses import dataclass
from typing import Any

import replwire.codec as codec
from replwire.codec import LSN, RelationColumn, Timestamp, TupleColumn

VECTORS_FILE = pathlib.Path(__file__).parent.parent / "vectors" / "messages.json"


@dataclass
class Vector:
    name: str
    layer: str
    ctx: dict[str, Any]
    sender: str | None
    wire: bytes
    expect: dict[str, Any] | None
    error: dict[str, Any] | None

    def parse(self):
        if self.layer == "logical":
            return codec.parse(self.wire, **self.ctx)
        return codec.parse_envelope(self.wire, sender=self.sender)

    def build(self, message):
        if self.layer == "logical":
            return codec.build(message, **self.ctx)
        return codec.build_envelope(message)


def _wire(fields: list[str]) -> bytes:
    out = bytearray()
    for item in fields:
        for token in item.split():
            try:
                out += bytes.fromhex(token)
            except ValueError:
                break  # the rest of the entry is the note
    return bytes(out)


def _value(annotation: Any, value: Any) -> Any:
    if value is None:
        return None
    args = typing.get_args(annotation)
    if args and type(None) in args:  # X | None
        annotation = next(a for a in args if a is not type(None))
    origin = typing.get_origin(annotation)
    if origin is list:
        (element,) = typing.get_args(annotation)
        if element is TupleColumn:
            return [TupleColumn(kind=c[0], data=bytes.fromhex(c[1]) if len(c) > 1 else None) for c in value]
        if element is RelationColumn:
            return [RelationColumn(**c) for c in value]
        return list(value)
    if annotation is LSN:
        return LSN(value)
    if annotation is Timestamp:
        return Timestamp(value)
    if annotation is bytes:
        return bytes.fromhex(value)
    return value


def expected_message(expect: dict[str, Any]):
    cls = getattr(codec, expect["class"])
    hints = typing.get_type_hints(cls)
    kwargs = {name: _value(hints[name], value) for name, value in expect.items() if name != "class"}
    return cls(**kwargs)


def load() -> list[Vector]:
    data = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
    return [Vector(name=v["name"], layer=v["layer"], ctx={"in_stream": False, **v.get("ctx", {})}
                   if v["layer"] == "logical" else {}, sender=v.get("sender"), wire=_wire(v["wire"]),
                   expect=v.get("expect"), error=v.get("error"))
            for v in data["vectors"]]


ALL = load()
VALID = [v for v in ALL if v.expect is not None]
INVALID = [v for v in ALL if v.error is not None]
