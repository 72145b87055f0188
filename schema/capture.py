"""replwire capture files: a header, then one checksummed record per pgoutput message.

Strategy: the file is :data:`HEADER` followed by :data:`RECORD` after :data:`RECORD` until its end.  Both
are a :class:`~replwire.schema.core.Crc32` around their fields, so a reader can tell a complete record
from a torn or corrupt tail and keep everything before it.  The header records what is needed to parse
the records again -- the protocol version, the pgoutput options and the client encoding they were
captured with -- and the server's version.  Declared like the protocol messages, so the same walker documents it.
"""

from .core import (
    Counted,
    Crc32,
    Field,
    FieldMeta,
    Int8,
    Int16,
    Int32,
    LengthPrefixedBytes,
    Lsn,
    Magic,
    String,
    Xid,
    field,
    record,
)

#: The first bytes of every capture file ("\r\n" and "\x1a" catch text-mode and truncated transfers).
MAGIC = b"RWCAP\r\n\x1a"
#: The format version this code writes and reads.
FORMAT_VERSION = 1
#: The header option that holds the connection's client encoding (PostgreSQL's name), and its value when
#: the option is absent (a file captured in UTF8, which is written without it).
CLIENT_ENCODING = "client_encoding"
DEFAULT_CLIENT_ENCODING = "UTF8"

CAPTURE_REF = "capture-file-format"
CAPTURE_PAGE = "capture-format"  # the docs page the anchors refer to

OPTION = record(
    field("name", String, "pgoutput option name, e.g. streaming."),
    field("value", String, "Its value, as sent to the server (a string)."),
    doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

HEADER_FIELDS = record(
    Field("magic", Magic(MAGIC), FieldMeta(doc="Identifies a replwire capture file.", spec_type="Byte8",
                                           value="bytes")),
    field("format_version", Int16, "Version of this file format; a reader refuses versions it does not know."),
    field("server_version", Int32, "server_version_num of the server the records came from (e.g. 180006); "
                                   "0 when unknown."),
    field("proto_version", Int8, "pgoutput protocol version the records were captured with (1 to 4)."),
    Field("options", Counted(Int16.construct, OPTION),
          FieldMeta(doc="The pgoutput options of the capture besides proto_version, as name/value pairs, and "
                        "client_encoding: the connection's client encoding (PostgreSQL's name), which the "
                        "messages' Strings and text values are in (UTF8 when absent).",
                    spec_type="Int16 count, then each Option", value="items")),
    doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

HEADER = record(
    Field("header", Crc32(HEADER_FIELDS), FieldMeta(doc="The header's fields, then a CRC-32 of them.",
                                                    spec_type="header fields, Int32 CRC-32", value="record")),
    doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

RECORD_FIELDS = record(
    field("lsn", Lsn, "LSN of the message: the SQL interface's lsn column, or the XLogData's data_start."),
    field("xid", Xid, "The SQL interface's xid column (0 over the walsender, and for a message outside any "
                      "transaction)."),
    field("data", LengthPrefixedBytes, "The pgoutput message, exactly as the server sent it."),
    doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

RECORD = record(
    Field("record", Crc32(RECORD_FIELDS), FieldMeta(doc="LSN, xid and message, then a CRC-32 of them.",
                                                    spec_type="record fields, Int32 CRC-32", value="record")),
    doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)
