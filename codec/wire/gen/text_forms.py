"""The forms of server text the compiled codec reads many at a time into typed column buffers: one source for
both sides.

``texts_typed`` (the C twin of :mod:`replwire.codec.stream.values`, ``codec/stream/values.c``) takes a form
and the Arrow buffers of many text values of one column; :data:`FORMS` names the forms and :func:`c_enums`
writes them as the C enum (``FORM_*``) that :mod:`replwire.codec.wire.gen.c_module` puts before the twins, so
neither side copies the other's numbers.
"""

from __future__ import annotations

__all__ = ["FORMS", "c_enums"]

#: What each form reads, as the type's output function writes it, into which Arrow layout:
#: ``int16``/``int32``/``int64`` (int2/4/8), ``float32``/``float64`` (float4/8, read as a double first),
#: ``bool`` (a bitmap), ``date32`` (days from 1970), ``timestamp`` and ``timestamptz`` (microseconds from
#: 1970, the latter in UTC), ``decimal128`` (numeric(p, s), little-endian 128-bit), ``hex_bytes`` (bytea's
#: ``\x`` form, as binary) and ``interval`` (as the ISO 8601 duration replwire writes, as text).
FORMS = {"int16": 1, "int32": 2, "int64": 3, "float32": 4, "float64": 5, "bool": 6, "date32": 7, "timestamp": 8,
         "timestamptz": 9, "decimal128": 10, "hex_bytes": 11, "interval": 12}


def c_enums() -> str:
    """The forms as the C of ``texts_typed`` names them."""
    items = [f"FORM_{name.upper()} = {number}" for name, number in FORMS.items()]
    return "\n".join(["/* the forms texts_typed reads (replwire.codec.wire.gen.text_forms) */",
                      "enum {\n    " + ",\n    ".join(items) + f",\n    FORM_LAST = {max(FORMS.values())}\n}};"])
