"""The buffers of the compiled column path's runs, by name: one source for both sides.

``rows_columns`` (``codec/split/columns.c``) returns a run's column buffers as a tuple, which
:class:`replwire.codec.split.columns.ColumnRun` carries and :mod:`replwire.spark.rows` wraps as Arrow arrays
by name (:data:`BUFFERS`).  :func:`c_enums` writes the names as the C's ``K_`` enum, and which of them are
validities (one byte per row in C, a bitmap once returned) and which are texts (int32 offsets into them), so
that :mod:`replwire.codec.wire.gen.c_module` puts them before the column path and neither side copies the
other's order by hand.
"""

from __future__ import annotations

__all__ = ["BUFFERS", "TEXTS", "VALIDITIES", "c_enums"]

#: The buffers, in the order of the tuple: the rows' shapes, LSNs and their validity, positions, their
#: transaction's facts (xid, commit LSN, end LSN, commit time and its validity), the JSON row images (new,
#: old, key: each a validity, offsets, text), unchanged_toast (a validity, offsets into the names, then the
#: names' offsets and text); the cells (each row's new and old-or-key tuple's first cell, each cell's kind,
#: offsets, bytes); and each row's subxid (a streamed transaction's change's xid) and its validity.
BUFFERS = ("shape", "lsn", "lsn_ok", "position", "xid", "commit_lsn", "end_lsn", "commit_time", "time_ok", "new_ok",
           "new_off", "new", "old_ok", "old_off", "old", "key_ok", "key_off", "key", "toast_ok", "toast_off",
           "name_off", "name", "new_at", "old_at", "cell_kind", "cell_off", "cell", "subxid", "subxid_ok")
#: The buffers of one byte per row in C that go out as validity bitmaps (``None`` where every row is valid).
VALIDITIES = ("lsn_ok", "time_ok", "new_ok", "old_ok", "key_ok", "toast_ok", "subxid_ok")
#: The text buffers, which int32 offsets index.
TEXTS = ("new", "old", "key", "name", "cell")


def c_enums() -> str:
    """The buffers as the column path's C names them: ``K_<NAME>``, ``K_COUNT``, ``K_VALIDITY`` and ``K_TEXT``."""
    def k(name: str) -> str:
        return f"K_{name.upper()}"

    return "\n".join([
        "/* the column buffers, in the order rows_columns returns them (replwire.codec.wire.gen.column_buffers) */",
        "enum {\n    " + ",\n    ".join([*map(k, BUFFERS), "K_COUNT"]) + "\n};",
        "/* which buffers hold one byte per row that becomes a validity bitmap */",
        f"static const int K_VALIDITY[] = {{{', '.join(map(k, VALIDITIES))}}};",
        "/* the text buffers (int32 offsets into them) */",
        f"static const int K_TEXT[] = {{{', '.join(map(k, TEXTS))}}};"])
