"""replwire capture files: a header, then one checksummed record per pgoutput message.

Strategy: the file is :data:`HEADER` followed by :data:`RECORD` after :data:`RECORD` until its end.  Both
are a :class:`~replwire.schema.constructs.Crc32` around their fields, so a reader can tell a complete record
from a torn or corrupt tail and keep everything before it.  The header records what is needed to parse
the records again -- the protocol version, the pgoutput options and the client encoding they were
captured with -- the server's version, and where the records came from (slot, server, database), so that a
capture is resumed only from its own slot.  Declared like the protocol messages, so the same walker documents it.

An initial snapshot is stored in the same records: a *snapshot section* at the start of the file, whose
records' data are the snapshot record kinds below instead of pgoutput messages.  Their first byte (0x01 to
0x06) is never a pgoutput tag (those are ASCII letters), so a reader tells them apart by it.  The section
says which slot it belongs to before the slot is created (:data:`SNAPSHOT_BEGIN`), then the slot's consistent
point (:data:`SNAPSHOT_SLOT`), then per table its Relation (and Type) messages, as pgoutput would send them,
and its rows as ``COPY ... TO STDOUT`` wrote them, whole rows in records of bounded size; it is complete once
:data:`SNAPSHOT_END` is in the file.  Every record after :data:`SNAPSHOT_SLOT` has the consistent point as its
LSN.  Format version 2 added the section; a version 1 file is a version 2 file without one.

Format version 3 added :data:`SLOT_CONFIRMED`: where the slot stood when a capture started streaming, and
each position the capture acknowledged beyond what its records complete.  With them a reader sees a
missing segment: a capture that starts past everything the files before it reach started on a slot that
had moved on without them.  A version 2 file is a version 3 file without these records.

Format version 4 added the backfill records: a capture that copies a table while it streams (a *backfill*)
reads the table in chunks by key, each between two logical messages of its own (watermarks), and writes a
chunk's rows right after its closing watermark's record, as the table's rows at that position
(:data:`BACKFILL_CHUNK`, :data:`BACKFILL_ROWS`, :data:`BACKFILL_END`).  Their records have the closing
watermark's LSN, and a reader applies each row as the row of its key at that position: it replaces what the
key had.  A version 3 file is a version 4 file without them.

Format version 5 added :data:`COLUMN_DEFAULTS`, written right after each Relation message of the stream:
the stored default of each published column that has one.  A column added with ``ADD COLUMN ... DEFAULT``
holds that value in every row that existed then, which the stream never sends until the row changes; with
the record a reader fills it in.  A version 4 file is a version 5 file without them.

A capture with rotation writes its stream into a series of files, *segments*, each a capture file of its own
whose header options say its number and the stream position it starts at (:data:`SEGMENT`,
:data:`SEGMENT_START`), and whose first record is a :data:`SLOT_CONFIRMED` of that position.  Header
options, like the slot's name, they need no new format version: an older reader decodes a segment as any
capture file (taking the two for pgoutput options).
"""

from .constructs import Counted, Crc32, Magic
from .fields import (
    Field,
    FieldMeta,
    Int8,
    Int16,
    Int32,
    Int64,
    LengthPrefixedBytes,
    Lsn,
    Oid,
    RestBytes,
    String,
    Xid,
    counted,
    field,
    record,
)
from .message_spec import message

__all__ = [
    "CLIENT_ENCODING", "DATABASE", "DEFAULT_CLIENT_ENCODING", "FORMAT_VERSION", "FORMAT_VERSIONS", "HEADER",
    "HEADER_FIELDS", "MAGIC", "NOT_PGOUTPUT", "OPTION", "RECORD", "RECORD_FIELDS", "SLOT_NAME", "SNAPSHOT_BEGIN",
    "SNAPSHOT_END", "SNAPSHOT_RECORDS", "SNAPSHOT_ROWS", "SNAPSHOT_SCHEMA_MESSAGE", "SNAPSHOT_SLOT", "SNAPSHOT_TABLE",
    "SNAPSHOT_TABLE_END", "SYSTEM_IDENTIFIER", "SEGMENT", "SEGMENT_START", "SLOT_CONFIRMED", "BACKFILL_CHUNK",
    "BACKFILL_ROWS", "BACKFILL_END", "BACKFILL_RECORDS", "BACKFILL_PREFIX", "CAPTURE_RECORDS", "COLUMN_DEFAULT",
    "COLUMN_DEFAULTS",
]

#: The first bytes of every capture file ("\r\n" and "\x1a" catch text-mode and truncated transfers).
MAGIC = b"RWCAP\r\n\x1a"
#: The format version this code writes.
FORMAT_VERSION = 5
#: The format versions this code reads (version 2 added the snapshot section, version 3 SlotConfirmed,
#: version 4 the backfill records).
FORMAT_VERSIONS = (1, 2, 3, 4, 5)
#: The header option that holds the connection's client encoding (PostgreSQL's name), and its value when
#: the option is absent (a file captured in UTF8, which is written without it).
CLIENT_ENCODING = "client_encoding"
DEFAULT_CLIENT_ENCODING = "UTF8"
#: The header options that say where the records came from, written by ``replwire capture`` so that resuming
#: a file from another slot, server or database is refused: the replication slot's name, the server's
#: system identifier (``SELECT system_identifier FROM pg_control_system()``, in decimal) and the database's
#: name.  Like :data:`CLIENT_ENCODING` they are not pgoutput options (never sent to a server); a file
#: without them (captured before they were written, or written by other tools) is from an unknown source.
SLOT_NAME = "slot_name"
SYSTEM_IDENTIFIER = "system_identifier"
DATABASE = "database"
#: The header options of a *segment*: one of the files a capture with rotation (``--rotate-size``,
#: ``--rotate-time``) writes its stream into, one after the other.  ``segment`` is its number (1, 2, ...; in
#: decimal), ``segment_start`` the stream position it starts at (PostgreSQL's form, e.g. ``0/16B3748``):
#: where the slot stood when it was opened, which the segment before it reaches.  Absent from a file
#: written without rotation.
SEGMENT = "segment"
SEGMENT_START = "segment_start"
#: Every header option that is not a pgoutput option.
NOT_PGOUTPUT = (CLIENT_ENCODING, SLOT_NAME, SYSTEM_IDENTIFIER, DATABASE, SEGMENT, SEGMENT_START)

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
                        "entries that are not pgoutput options: client_encoding, the connection's client "
                        "encoding (PostgreSQL's name), which the messages' Strings and text values are in "
                        "(UTF8 when absent); and where the records came from, which resuming the file checks "
                        "(each may be absent): slot_name, the replication slot; system_identifier, the "
                        "server's (pg_control_system(), in decimal); database, the database's name; and for a "
                        "segment of a capture with rotation, segment, its number (1, 2, ...), and segment_start, "
                        "the stream position it starts at (e.g. 0/16B3748).",
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


# -- the snapshot section ------------------------------------------------------------------------------------

SNAPSHOT_FAMILY = "snapshot"

SNAPSHOT_BEGIN = message(
    b"\x01", "SnapshotBegin",
    field("slot", String, "Name of the replication slot the snapshot is taken with; it is created after "
                          "this record is durable, so a capture that stops here knows the slot is its own."),
    field("binary", Int8, "1 when the rows are in COPY's binary format (a --binary capture), 0 for text."),
    doc="Opens the snapshot section: the first record of the file.",
    family=SNAPSHOT_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

SNAPSHOT_SLOT = message(
    b"\x02", "SnapshotSlot",
    field("lsn", Lsn, "The slot's consistent point: the snapshot holds every transaction committed before "
                      "it, the slot sends every one committed after it."),
    field("snapshot_name", String, "Name of the snapshot the server exported (pg_export_snapshot's form)."),
    doc="The slot was created with an exported snapshot.",
    family=SNAPSHOT_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

SNAPSHOT_SCHEMA_MESSAGE = record(
    field("data", LengthPrefixedBytes, "A pgoutput Type or Relation message (protocol version 1 layout)."),
    doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

SNAPSHOT_TABLE = message(
    b"\x03", "SnapshotTable",
    field("relation_id", Oid, "OID of the table (its Relation's relation_id)."),
    counted("messages", Int16, SNAPSHOT_SCHEMA_MESSAGE, "message",
            "The Type messages of its columns' user-defined types, then its Relation message, built as "
            "pgoutput sends them: the published columns only (the column list), with their key flags."),
    doc="Starts one table's rows.",
    family=SNAPSHOT_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

SNAPSHOT_ROWS = message(
    b"\x04", "SnapshotRows",
    field("relation_id", Oid, "OID of the table."),
    field("binary", Int8, "1 when the rows are in COPY's binary format, 0 for text (as SnapshotBegin says)."),
    field("rows", Int32, "How many rows follow."),
    field("data", RestBytes, "Whole rows as COPY ... TO STDOUT writes them (text, or binary tuples without "
                             "the file header and trailer), the published columns in the Relation's order."),
    doc="Rows of the table, at most about 256 KiB of them per record.",
    family=SNAPSHOT_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

SNAPSHOT_TABLE_END = message(
    b"\x05", "SnapshotTableEnd",
    field("relation_id", Oid, "OID of the table."),
    field("rows", Int64, "How many rows the table had in the snapshot."),
    doc="Ends one table's rows.",
    family=SNAPSHOT_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

SNAPSHOT_END = message(
    b"\x06", "SnapshotEnd",
    field("lsn", Lsn, "The consistent point again: the position this section completes."),
    field("tables", Int32, "How many tables the snapshot holds."),
    field("rows", Int64, "How many rows in all."),
    doc="Closes the snapshot section: every table is in the file.",
    family=SNAPSHOT_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

#: The snapshot record kinds, in the order a section holds them.
SNAPSHOT_RECORDS = (SNAPSHOT_BEGIN, SNAPSHOT_SLOT, SNAPSHOT_TABLE, SNAPSHOT_ROWS, SNAPSHOT_TABLE_END, SNAPSHOT_END)


# -- the slot's confirmed positions --------------------------------------------------------------------------

SLOT_FAMILY = "slot"

SLOT_CONFIRMED = message(
    b"\x07", "SlotConfirmed",
    field("lsn", Lsn, "The position: the slot's confirmed position, or one the capture acknowledged."),
    field("at_start", Int8, "1: the slot's confirmed position as the capture started streaming (the server "
                            "sends what completes after it); 0: a position the capture acknowledged to the "
                            "server, written and made durable before the acknowledgement."),
    doc="Where the slot stands.  Written when streaming starts (each run and reconnection), and before every "
        "acknowledgement of a position beyond what the records complete (the server's WAL end, once "
        "nothing is in flight); never inside a transaction.  Its record's LSN is the same position.  A "
        "reader of several files checks that each start is within what the records before it reach.",
    family=SLOT_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)


# -- backfills -----------------------------------------------------------------------------------------------

BACKFILL_FAMILY = "backfill"
#: The prefix of the logical messages a backfill emits (its watermarks and requests).
BACKFILL_PREFIX = "replwire.backfill"

BACKFILL_CHUNK = message(
    b"\x08", "BackfillChunk",
    field("run", Int32, "Number of the backfill run in this capture (a run copies one table once)."),
    field("chunk", Int32, "Number of the chunk in its run, from 0."),
    field("relation_id", Oid, "OID of the table."),
    field("binary", Int8, "1 when the rows are in COPY's binary format (a --binary capture), 0 for text."),
    field("rows", Int64, "How many rows the chunk's BackfillRows records hold in all."),
    field("last", Int8, "1 when the chunk is its run's last: the table has no rows past it, and no key is "
                        "left to read again."),
    field("cursor", String, "The key of the last row the chunk read, as a JSON array of the key columns' "
                            "server texts (empty once no row is past it): the next chunk reads the keys after "
                            "it."),
    field("refetch", String, "The keys the run reads again at its end, as a JSON array of keys, each an array "
                             "of the key columns' bytes in hex (as the stream carries them; null for NULL), "
                             "or empty: rows a key change moved into keys already read, whose unchanged "
                             "TOASTed values the stream does not carry."),
    field("snapshot", String, "The snapshot the chunk was read in (pg_current_snapshot()'s text)."),
    field("read_us", Int64, "How long the chunk's read took, in microseconds."),
    field("at_us", Int64, "When the chunk was read: microseconds since 2000-01-01 00:00 UTC."),
    counted("messages", Int16, SNAPSHOT_SCHEMA_MESSAGE, "message",
            "The Type messages of the table's user-defined types, then its Relation message, as the chunk "
            "was read (the published columns, with their key flags): its rows are of this shape."),
    doc="Starts a chunk of a backfill: the table's rows in a range of its key, as they are at this "
        "record's LSN (the position of the chunk's closing watermark, whose record comes right before).",
    family=BACKFILL_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

BACKFILL_ROWS = message(
    b"\x09", "BackfillRows",
    field("relation_id", Oid, "OID of the table."),
    field("binary", Int8, "1 when the rows are in COPY's binary format, 0 for text (as BackfillChunk says)."),
    field("rows", Int32, "How many rows follow."),
    field("data", RestBytes, "Whole rows in COPY ... TO STDOUT's form (text, or binary tuples without the "
                             "file header and trailer), the columns of the chunk's Relation in its order."),
    doc="Rows of a chunk, at most about 256 KiB of them per record: each is its key's row at the record's "
        "LSN, and replaces what the key had.",
    family=BACKFILL_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

BACKFILL_END = message(
    b"\x0a", "BackfillEnd",
    field("run", Int32, "Number of the backfill run."),
    field("relation_id", Oid, "OID of the table."),
    field("reason", Int8, "0: every row was copied; 1: the table was truncated meanwhile (its rows from then "
                          "on are all in the stream); 2: cancelled; 3: refused (see message)."),
    field("chunks", Int32, "How many chunks the run wrote."),
    field("rows", Int64, "How many rows in all."),
    field("message", String, "Why, for a run that was refused; empty otherwise."),
    doc="Ends a backfill run.",
    family=BACKFILL_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

#: The backfill record kinds.
BACKFILL_RECORDS = (BACKFILL_CHUNK, BACKFILL_ROWS, BACKFILL_END)


# -- column defaults -----------------------------------------------------------------------------------------

DEFAULTS_FAMILY = "defaults"

COLUMN_DEFAULT = record(
    field("name", String, "The column's name, as the Relation message names it."),
    field("kind", Int8, "1: value is the column's stored default (pg_attribute.attmissingval), which every "
                        "row that existed when the column was added holds; 2: the column has a default but "
                        "none is stored (the table was rewritten: a volatile default, or a rewrite since), so "
                        "the rows the stream has not sent hold values it does not know."),
    field("value", String, "The value's text (its type's output function) for kind 1; empty for kind 2."),
    doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

COLUMN_DEFAULTS = message(
    b"\x0b", "ColumnDefaults",
    field("relation_id", Oid, "OID of the table (the Relation message's relation_id)."),
    counted("columns", Int16, COLUMN_DEFAULT, "column",
            "The published columns of the Relation that have a stored default or a default, as the catalog "
            "had them when the capture read it."),
    doc="The defaults of a table's columns, written right after a Relation message of the stream (when one "
        "of its columns has any), with the Relation's LSN.  A reader that sees a column added between two "
        "shapes of a table fills it, in the rows written under the older shape, with its kind 1 value: what "
        "the server reads for them.",
    family=DEFAULTS_FAMILY, layer="capture", doc_ref=CAPTURE_REF, docs_page=CAPTURE_PAGE,
)

#: Every record kind of a capture file that is not a pgoutput message: the snapshot section's,
#: SlotConfirmed, the backfills' and ColumnDefaults.
CAPTURE_RECORDS = (*SNAPSHOT_RECORDS, SLOT_CONFIRMED, *BACKFILL_RECORDS, COLUMN_DEFAULTS)
