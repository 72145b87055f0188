"""How the compiled row writer writes a column's values: the numbers a row plan carries, one source for both
sides.

A row plan (``rows_plan``) says of each column how its text values go (a *text way*: a JSON string of the
text, the integer, a bool, through the plan's Python function, or one of the types the C reads itself) and how
its binary values go (a *binary way*: the type whose send function's bytes the C reads, 0 for none).  An array's
way is :data:`ARRAY` (or :data:`BINARY_ARRAY`) plus its element's.  A plan also says what its text is in: the
client encoding and the form its output takes (:data:`ENCODINGS`).  :mod:`replwire.codec.stream.jsonl` picks
the ways by type; :func:`c_enums` writes them as the C enums of the row writer (``ROW_*``, ``BIN_*``), which
:mod:`replwire.codec.wire.gen.c_module` puts before it, so neither side copies the other's numbers.
"""

from __future__ import annotations

__all__ = ["ARRAY", "ARRAY_ELEMENTS", "BINARY_ARRAY", "BINARY_WAYS", "ENCODINGS", "TEXT_WAYS", "c_enums"]

#: The text ways: ``string``, ``int``, ``bool`` and ``call`` (the plan's function), then the types whose
#: server text the C writes where it has the server's form (else through the function).
TEXT_WAYS = {"string": 1, "int": 2, "bool": 3, "call": 4, "numeric": 5, "uuid": 6, "bytea": 7, "date": 8,
             "time": 9, "timestamp": 10, "timestamptz": 11, "float": 12, "interval": 13}
#: An array's text way: this plus its element's (one of :data:`ARRAY_ELEMENTS`).
ARRAY = 32
#: The text ways an array's elements may have.
ARRAY_ELEMENTS = ("string", "int", "bool", "numeric", "uuid", "float")
#: The binary ways, by the type whose send function's bytes they read (``text`` also stands for json and the
#: other text types, ``bytea`` for any type kept as its bytes).
BINARY_WAYS = {"int2": 1, "int4": 2, "int8": 3, "bool": 4, "float4": 5, "float8": 6, "text": 7, "jsonb": 8,
               "bytea": 9, "uuid": 10, "date": 11, "timestamp": 12, "timestamptz": 13, "time": 14, "interval": 15,
               "numeric": 16}
#: An array's binary way: this plus its element's (any binary way).
BINARY_ARRAY = 32
#: What a plan's text is in (``rows_plan``'s ``encoding``), and how the C writes it: ``utf8`` checked and
#: copied; ``latin1`` (every byte is U+0000-U+00FF) each byte 0x80-0xFF as its two bytes of UTF-8;
#: ``sql_ascii`` (bytes 128-255 are the surrogates U+DC80-U+DCFF) each such byte as the JSON escape
#: ``\udc80``-``\udcff``, what a line of text written with ``errors="backslashreplace"`` holds (the bytes
#: ``replwire decode`` prints); ``sql_ascii_surrogates`` each as the three bytes ``surrogatepass`` writes of
#: its surrogate (for a writer that decodes them back into the same ``str``, ``rows_row``).
ENCODINGS = {"utf8": 0, "latin1": 1, "sql_ascii": 2, "sql_ascii_surrogates": 3}


def c_enums() -> str:
    """The ways as the C of the row writer names them."""
    def enum(prefix: str, ways: dict[str, int], array: int) -> str:
        items = [f"{prefix}_{name.upper()} = {number}" for name, number in ways.items()]
        items += [f"{prefix}_LAST = {max(ways.values())}", f"{prefix}_ARRAY = {array}"]
        return "enum {\n    " + ",\n    ".join(items) + "\n};"

    elements = " || ".join(f"way == ROW_{name.upper()}" for name in ARRAY_ELEMENTS)
    encodings = [f"ENC_{name.upper()} = {number}" for name, number in ENCODINGS.items()]
    encodings.append(f"ENC_LAST = {max(ENCODINGS.values())}")
    return "\n".join([
        "/* the row plans' ways (replwire.codec.wire.gen.row_ways) */",
        enum("ROW", TEXT_WAYS, ARRAY), enum("BIN", BINARY_WAYS, BINARY_ARRAY),
        "/* what a plan's text is in, and the form it is written in */",
        "enum {\n    " + ",\n    ".join(encodings) + "\n};",
        "/* the text ways an array's elements may have */",
        f"static int array_element(int way) {{ return {elements}; }}"])
