"""One message's declaration, with what the docs and the codec need to know about it.

Strategy: :func:`message` declares a message as its tag field (:func:`~replwire.schema.fields.tag_field`)
followed by its fields, in one construct ``Struct``, and returns a :class:`MessageSpec`; the messages of one
family share their keyword arguments as a :class:`Family`.  The family modules (:mod:`replwire.schema.dml`,
...) are written in these words; every consumer (the codec, its generators, the docs, the strategies) reads the
specs.  This module imports construct only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypedDict

from construct import Struct

from .fields import DOCS_LOGICAL, Field, record, tag_field

__all__ = ["Family", "MessageSpec", "message"]


@dataclass(frozen=True)
class MessageSpec:
    """One message of a layer: its declaration and what the docs and the codec need to know about it.

    ``declaration`` is the construct ``Struct``; ``min_proto`` the lowest protocol version it exists in
    (also enforced by its :class:`Tag`); ``since_server`` the first PostgreSQL major that sends it;
    ``options`` the pgoutput options that make the server send it; ``family`` groups the docs.
    """

    name: str
    tag: str
    layer: str
    family: str
    declaration: Struct
    doc: str
    doc_ref: str
    docs_page: str = DOCS_LOGICAL
    min_proto: int = 1
    since_server: int = 10
    options: tuple[str, ...] = ()


class Family(TypedDict, total=False):
    """Keyword arguments of :func:`message` that the messages of one family share (``**COMMON``)."""

    family: str
    layer: str
    docs_page: str
    min_proto: int
    since_server: int
    options: tuple[str, ...]


def message(tag: bytes, name: str, *fields: Field, family: str, doc: str, doc_ref: str,
            tag_doc: str | None = None, layer: str = "logical", min_proto: int = 1,
            since_server: int = 10, options: tuple[str, ...] = (), docs_page: str = DOCS_LOGICAL,
            ) -> MessageSpec:
    """Declare one message: its tag field followed by ``fields``, as a construct ``Struct``."""
    gate = min_proto if (layer == "logical" and min_proto > 1) else None
    head = tag_field(tag, name, tag_doc or f"Identifies the message as {name}.", min_proto=gate)
    for f in (head, *fields):  # a field cannot be older than its message
        if f.meta.since < min_proto:
            f.meta = dataclasses.replace(f.meta, since=min_proto)
    declaration = record(head, *fields, doc_ref=doc_ref, docs_page=docs_page)
    return MessageSpec(name=name, tag=tag.decode("ascii"), layer=layer, family=family,
                       declaration=declaration, doc=doc, doc_ref=doc_ref, docs_page=docs_page,
                       min_proto=min_proto, since_server=since_server, options=options)
