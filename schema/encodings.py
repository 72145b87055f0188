"""PostgreSQL's client encodings, as the Python codecs a String is read and written in.

Strategy: a String's bytes are in the connection's client encoding (``SHOW client_encoding``).
:func:`text_codec` maps PostgreSQL's name of it (or Python's) to one Python codec, checked once and cached;
:func:`decode_string` and :func:`encode_string` are the only places a String's bytes become text and back,
failing with :class:`~replwire.schema.wire_error.WireError`.  ``SQL_ASCII``, which PostgreSQL sends
unconverted, is registered as a Python codec of its own.
"""

from __future__ import annotations

import codecs
import functools
from typing import Any

from .wire_error import WireError

__all__ = ["CLIENT_ENCODINGS", "SQL_ASCII", "UTF8", "decode_string", "encode_string", "text_codec"]

#: The codec of a String when the context names none: PostgreSQL's UTF8.
UTF8 = "utf-8"
#: The codec of PostgreSQL's ``SQL_ASCII``, which sends its bytes unconverted: bytes 0-127 are ASCII, and
#: each byte 128-255 decodes to the lone surrogate U+DC80-U+DCFF that Python's ``surrogateescape`` gives it
#: (PEP 383).  Every NUL-free byte string decodes, and encodes back to the same bytes; a ``str`` builds
#: exactly when it is made of ASCII characters and such surrogates.  Registered as a Python codec (this
#: name only), so that every path decodes a String the same way: ``raw.decode(codec)``.
SQL_ASCII = "sql_ascii"

#: PostgreSQL's client encodings (``SHOW client_encoding``) whose Python codec does not share their name.
#: The others are found by name (``LATIN1`` is ``iso8859-1``); ``EUC_TW`` and ``MULE_INTERNAL`` have no
#: Python codec.
_PG_CODECS = {
    "SQL_ASCII": SQL_ASCII, "KOI8R": "koi8_r", "KOI8U": "koi8_u", "WIN866": "cp866", "WIN874": "cp874",
    **{f"WIN{n}": f"cp{n}" for n in range(1250, 1259)},
}
_PG_NAMES = (
    "SQL_ASCII EUC_JP EUC_CN EUC_KR EUC_JIS_2004 UTF8 LATIN1 LATIN2 LATIN3 LATIN4 LATIN5 LATIN6 LATIN7 LATIN8 "
    "LATIN9 LATIN10 WIN1256 WIN1258 WIN866 WIN874 KOI8R WIN1251 WIN1252 ISO_8859_5 ISO_8859_6 ISO_8859_7 "
    "ISO_8859_8 WIN1250 WIN1253 WIN1254 WIN1255 WIN1257 KOI8U SJIS BIG5 GBK UHC GB18030 JOHAB SHIFT_JIS_2004"
).split()


def _sql_ascii_search(name: str) -> codecs.CodecInfo | None:
    if name.lower().replace("-", "_") != SQL_ASCII:
        return None
    return codecs.CodecInfo(name=SQL_ASCII,
                            encode=lambda text, errors="strict": (text.encode("ascii", "surrogateescape"),
                                                                  len(text)),
                            decode=lambda data, errors="strict": (bytes(data).decode("ascii", "surrogateescape"),
                                                                  len(data)))


codecs.register(_sql_ascii_search)

#: The Python codec of each PostgreSQL client encoding replwire can read, by PostgreSQL's name.
CLIENT_ENCODINGS: dict[str, str] = {name: codecs.lookup(_PG_CODECS.get(name, name)).name for name in _PG_NAMES}
_LABELS = {codec: "UTF-8" if codec == UTF8 else name for name, codec in reversed(CLIENT_ENCODINGS.items())}


@functools.cache
def text_codec(encoding: Any) -> str:
    """The Python codec that decodes the Strings of a connection whose client encoding is ``encoding``.

    ``encoding`` is PostgreSQL's name of a client encoding (``UTF8``, ``LATIN1``, ``SQL_ASCII``, ``WIN1252``,
    any case) or a name Python knows that encoding by (``utf-8``, ``latin-1``, ``cp1252``).  Anything else
    -- an encoding PostgreSQL has no client encoding for (``utf-16``), or an unknown name -- is a caller
    error (``ValueError``).
    """
    if not isinstance(encoding, str):
        raise ValueError(f"encoding must be a str naming a client encoding, got {encoding!r}")
    codec = CLIENT_ENCODINGS.get(encoding.upper())
    if codec is None:
        try:
            codec = codecs.lookup(encoding).name
        except LookupError:
            codec = None
    if codec not in _LABELS:
        raise ValueError(f"encoding must name a PostgreSQL client encoding (UTF8, LATIN1, SQL_ASCII, ...) "
                         f"or its Python codec, got {encoding!r}")
    return codec


def decode_string(raw: bytes, codec: str) -> str:
    """A String's bytes (without the NUL) as text, in ``codec`` (one :func:`text_codec` gives)."""
    try:
        return raw.decode(codec)
    except UnicodeDecodeError as error:
        raise WireError(f"invalid {_LABELS[codec]} at byte {error.start} of the string") from None


def encode_string(text: Any, codec: str) -> bytes:
    """The bytes of a String (without the NUL) for ``text``, in ``codec`` (one :func:`text_codec` gives)."""
    if not isinstance(text, str):
        raise WireError(f"expected str, got {type(text).__name__}")
    if "\0" in text:
        raise WireError("a String cannot contain a NUL character")
    try:
        return text.encode(codec)
    except UnicodeEncodeError as error:
        raise WireError(f"not encodable as {_LABELS[codec]} at character {error.start}") from None
