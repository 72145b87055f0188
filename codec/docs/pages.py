"""The protocol reference pages, generated from the declarations: Markdown and SVG, one page per message.

Strategy: everything on a message page comes from :func:`replwire.codec.walker.layout` -- the field table
(wire type, the PostgreSQL docs' type label, the condition in words, since which protocol version, the
meaning, the link), the byte-layout diagram (fixed-size fields drawn to scale where their names fit,
variable parts marked, conditional parts dashed) -- plus worked examples: real captured messages that this
module explains byte by byte (:mod:`replwire.codec.wire.explain`), decodes and re-builds, refusing
(:class:`DocsError`) an example that does not round-trip, a message without an example and a field without
a description.  The mkdocs hook in ``docs/hooks/reference.py`` only feeds it the examples and writes the
pages.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Iterable
from dataclasses import dataclass

from ... import schema
from ...schema.message_spec import MessageSpec
from .. import walker
from ..messages import WireMessage
from ..wire.explain import Explanation, explain
from ..wire.reference import ENVELOPE_CLASSES, LOGICAL_CLASSES, build, build_envelope

__all__ = [
    "DocsError", "Example", "FRAMING", "all_specs", "check_example", "field_table", "framing_svg", "message_page",
    "nav", "nested_records", "page_path", "pages", "pick_examples", "wire_type",
]

#: Families in reading order, with their titles.
FAMILIES = {
    "transaction": "Transaction",
    "schema": "Schema",
    "dml": "Data changes",
    "logical_message": "Logical decoding message",
    "stream": "Streaming",
    "two_phase": "Two-phase commit",
    "envelope": "Walsender envelope",
}

#: What each protocol version adds, for the version matrix (its servers come from the declarations).
PROTO_ADDS = {
    1: "the base messages; Truncate from 11",
    2: "`streaming`, `binary` (`b` columns), `messages` (Message)",
    3: "`two_phase`",
    4: "`streaming = parallel` (the Stream Abort tail), `origin`",
}


class DocsError(RuntimeError):
    """The reference cannot be generated truthfully: a missing description, page or example, or an
    example that does not round-trip."""


@dataclass(frozen=True)
class Example:
    """A message to show: its bytes, parse context, and where it came from."""

    data: bytes
    source: str
    proto_version: int | None = None
    in_stream: bool = False
    sender: str | None = None


def all_specs() -> list[MessageSpec]:
    return list(schema.LOGICAL_MESSAGES) + [s for specs in schema.ENVELOPE.values() for s in specs.values()]


def page_path(spec: MessageSpec) -> str:
    """Where a message's page lives in the site (``reference/<family>/<name>.md``)."""
    return f"reference/{spec.family}/{slug(spec.name)}.md"


def slug(name: str) -> str:
    out = "".join(f"-{c.lower()}" if c.isupper() else c for c in name).lstrip("-")
    return out.replace("x-log-data", "xlogdata")


def title(spec: MessageSpec) -> str:
    words = "".join(f" {c}" if c.isupper() else c for c in spec.name).strip()
    return f"{words.replace('X Log Data', 'XLogData')} ({spec.tag!r})".replace("'", "`", 2)


# ---------------------------------------------------------------------------------------------------------
# words for nodes


def wire_type(node: walker.Node) -> str:
    """What a node is on the wire, in a few words."""
    if isinstance(node, walker.Int):
        return f"{'int' if node.signed else 'uint'}{8 * node.size}"
    if isinstance(node, walker.Zero):
        return f"{wire_type(node.int)}, always 0"
    if isinstance(node, walker.TagByte):
        return f"byte `{node.tag}`" if node.tag.isprintable() else f"byte 0x{ord(node.tag):02x}"
    if isinstance(node, walker.Text):
        return "UTF-8 text + NUL"
    if isinstance(node, walker.CharOf):
        return "byte: " + ", ".join(f"`{c}`" for c in node.choices)
    if isinstance(node, walker.LengthPrefixed):
        return f"{wire_type(node.length)} length + bytes"
    if isinstance(node, walker.Rest):
        return "bytes to the end"
    if isinstance(node, walker.DerivedCount):
        return f"{wire_type(node.int)} = number of {node.of}"
    if isinstance(node, (walker.When, walker.IfBytesRemain)):
        return wire_type(node.node)
    if isinstance(node, walker.MarkedBy):
        return f"byte `{node.marker}` + {wire_type(node.node)}"
    if isinstance(node, walker.CountedArray):
        return f"{wire_type(node.count)} count + {record_name(node.item)} × count"
    if isinstance(node, walker.ArrayOf):
        return f"{wire_type(node.item)} × {node.count_field}"
    if isinstance(node, walker.Record):
        return node.name or "record"
    if isinstance(node, walker.MagicBytes):
        return f"{len(node.value)} bytes `{node.value!r}`"
    if isinstance(node, walker.Checksummed):
        return f"{wire_type(node.node)} + uint32 CRC-32"
    raise DocsError(f"no words for {node!r}")


def record_name(node: walker.Node) -> str:
    if isinstance(node, walker.Record) and node.name:
        link = {"TupleColumn": "../dml/tupledata.md", "RelationColumn": "#relationcolumn"}.get(node.name)
        return f"[{node.name}]({link})" if link else node.name
    return wire_type(node)


def presence(node: walker.Node) -> str:
    """When the field is on the wire: "always", or each presence condition (a condition as the error
    messages quote it, from :func:`replwire.schema.constructs.render_condition`)."""
    parts = []
    while True:
        if isinstance(node, walker.When):
            parts.append(f"when `{node.text}`")
        elif isinstance(node, walker.IfBytesRemain):
            parts.append("when bytes remain (the message is longer)")
        elif isinstance(node, walker.MarkedBy) and node.optional:
            parts.append(f"when the next byte is `{node.marker}`")
        else:
            break
        node = node.node
    return "; ".join(parts) or "always"


def fixed_bytes(node: walker.Node) -> int | None:
    if isinstance(node, (walker.When, walker.IfBytesRemain)):
        return walker.fixed_size(node.node)
    return walker.fixed_size(node)


def is_conditional(node: walker.Node) -> bool:
    return isinstance(node, (walker.When, walker.IfBytesRemain)) or (
        isinstance(node, walker.MarkedBy) and node.optional)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def field_table(record: walker.Record, *, with_tag: bool = True) -> str:
    rows = ["| Field | Wire type | PostgreSQL docs type | Present | Since | Meaning |",
            "|---|---|---|---|---|---|"]
    for f in record.fields:
        if not f.meta.doc.strip():
            raise DocsError(f"field {f.name} has no description")
        if f.name == "tag" and not with_tag:
            continue
        since = f"v{f.meta.since}"
        meaning = f.meta.doc
        if f.meta.docs_page.startswith("https://"):
            meaning += f" [PostgreSQL docs]({f.meta.docs_url})"
        rows.append(f"| `{f.name}` | {_cell(wire_type(f.node))} | {_cell(f.meta.spec_type)} | "
                    f"{presence(f.node)} | {since} | {_cell(meaning)} |")  # its pipes are in code spans
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------------------
# the byte-layout diagram


_BYTE = 26  # pixels per byte
_VAR = 132  # width of a variable-length box
_ROW = 68
_MAX = 760
_NAME_PX = 8.0  # width of a character of a field's name (13 px monospace)
_NOTE_PX = 6.6  # width of a character of the size note under a box (12 px sans-serif)


def _boxes(record: walker.Record) -> list[tuple[str, int | None, bool]]:
    return [(f.name, fixed_bytes(f.node), is_conditional(f.node)) for f in record.fields]


def layout_svg(record: walker.Record, caption: str) -> str:
    """An SVG drawing of a record: one box per field, fixed sizes to scale unless the name needs more room
    (the size is written under every box), names never cut short."""
    rows: list[list[tuple[str, int | None, bool, float]]] = [[]]
    x: float = 0
    for name, size, conditional in _boxes(record):
        width = max(size * _BYTE if size is not None else _VAR, len(name) * _NAME_PX + 12)
        if x + width > _MAX and rows[-1]:
            rows.append([])
            x = 0
        rows[-1].append((name, size, conditional, width))
        x += width
    height = 34 + len(rows) * _ROW
    out = [f'<svg class="replwire-layout" xmlns="http://www.w3.org/2000/svg" width="{_MAX + 20}" '
           f'height="{height}" viewBox="0 0 {_MAX + 20} {height}" role="img" aria-label="{html.escape(caption)}">',
           f'<text x="10" y="18" font-size="13" fill="currentColor">{html.escape(caption)}</text>']
    offset: int | None = 0  # None once a variable-length or conditional field makes the rest unknown
    for r, row in enumerate(rows):
        x = 10
        y = 30 + r * _ROW
        for name, size, conditional, width in row:
            dash = ' stroke-dasharray="5 3"' if conditional else ""
            fill = "#e3f2fd" if size is not None else "#fff3e0"
            out.append(f'<rect x="{x:g}" y="{y}" width="{width:g}" height="36" fill="{fill}" stroke="#37474f"{dash}/>')
            if size is None:  # a jagged right edge marks a variable length
                out.append(f'<path d="M{x + width - 6:g},{y} l6,9 l-6,9 l6,9 l-6,9" fill="none" stroke="#37474f"/>')
            out.append(f'<text x="{x + width / 2:g}" y="{y + 23}" font-size="13" text-anchor="middle" '
                       f'font-family="monospace" fill="#102027">{html.escape(name)}</text>')
            below = f"{size} B" if size is not None else "variable"
            if offset is not None and len(below + ", at 000") * _NOTE_PX < width:
                below += f", at {offset}"
            out.append(f'<text x="{x + 2:g}" y="{y + 52}" font-size="12" fill="currentColor">'
                       f'{html.escape(below)}</text>')
            offset = offset + size if (offset is not None and size is not None and not conditional) else None
            x += width
    out.append("</svg>")
    return "".join(out)


def nested_records(record: walker.Record) -> list[walker.Record]:
    found: list[walker.Record] = []
    for f in record.fields:
        for n in walker.iter_nodes(f.node):
            if isinstance(n, walker.Record) and n.name and n.name not in {r.name for r in found}:
                found.append(n)
    return found


# ---------------------------------------------------------------------------------------------------------
# examples


def check_example(spec: MessageSpec, example: Example) -> Explanation:
    """Explain, decode and re-build an example; refuse one that does not give back its bytes."""
    if spec.layer == "logical":
        if example.proto_version is None:
            raise DocsError(f"example of {spec.name} from {example.source} has no proto_version")
        explanation = explain(example.data, proto_version=example.proto_version, in_stream=example.in_stream)
        rebuilt = build(explanation.message, proto_version=example.proto_version, in_stream=example.in_stream)
    else:
        explanation = explain(example.data, sender=example.sender)
        rebuilt = build_envelope(explanation.message)
    if type(explanation.message).spec is not spec:
        raise DocsError(f"example from {example.source} is a {type(explanation.message).__name__}, not {spec.name}")
    if rebuilt != example.data:
        raise DocsError(f"example of {spec.name} from {example.source} does not round-trip")
    return explanation


def example_section(spec: MessageSpec, example: Example) -> str:
    explanation = check_example(spec, example)
    context = (f"protocol version {example.proto_version}"
               + (", inside a Stream Start…Stop block" if example.in_stream else "")
               if spec.layer == "logical" else f"sent by the {example.sender}")
    lines = [f"*{len(example.data)} bytes, {context}; {example.source}.*", "",
             "| Offset | Bytes | Field | Value |", "|---:|---|---|---|"]
    for seg in explanation.segments:
        hex_bytes = seg.raw.hex(" ")
        if len(seg.raw) > 16:
            hex_bytes = seg.raw[:16].hex(" ") + f" … (+{len(seg.raw) - 16})"
        field = f"`{seg.path}`" + (" (header)" if seg.header else "")
        lines.append(f"| {seg.start} | `{hex_bytes}` | {field} | {_cell(html.escape(seg.value))} |")
    lines += ["", "Decoded, and re-built by this page's build to the same bytes:", "", "```python",
              pretty(explanation.message), "```"]
    return "\n".join(lines)


def pretty(message: WireMessage) -> str:
    """A message's repr with one field per line, and one list item per line."""
    lines = [f"{type(message).__name__}("]
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if isinstance(value, list) and value:
            lines += [f"    {f.name}=[", *(f"        {item!r}," for item in value), "    ],"]
        else:
            lines.append(f"    {f.name}={value!r},")
    if len(lines) == 1:
        return f"{type(message).__name__}()"
    return "\n".join([*lines, ")"])


def _shape(message: WireMessage) -> tuple[str | bool, ...]:
    keys = tuple(n for n in ("key", "old") if getattr(message, n, None) is not None)
    tail = getattr(message, "abort_lsn", "") is not None if hasattr(message, "abort_lsn") else None
    return keys + ((tail,) if tail is not None else ())


def pick_examples(spec: MessageSpec, candidates: Iterable[Example], limit: int = 3) -> list[Example]:
    """The shortest example of each distinct shape (stream state, old-row image, Stream Abort form)."""
    best: dict[tuple[bool, tuple[str | bool, ...]], Example] = {}
    sender = "server" if spec.tag in "wk" else "client"
    classes = LOGICAL_CLASSES if spec.layer == "logical" else ENVELOPE_CLASSES[sender]
    for example in candidates:
        if not example.data or chr(example.data[0]) != spec.tag or classes.get(spec.tag) is None:
            continue
        try:
            message = check_example(spec, example).message
        except DocsError:
            raise
        except ValueError:
            continue  # not this layer's message (tags collide across layers)
        key = (example.in_stream, _shape(message))
        if key not in best or len(example.data) < len(best[key].data):
            best[key] = example
    return [best[k] for k in sorted(best, key=repr)][:limit]


# ---------------------------------------------------------------------------------------------------------
# pages


def message_page(spec: MessageSpec, examples: list[Example]) -> str:
    lay = walker.layout(spec)
    if not examples:
        raise DocsError(f"{spec.name} has no worked example")
    versions = ", ".join(str(v) for v in range(spec.min_proto, schema.MAX_PROTO_VERSION + 1)) \
        if spec.layer == "logical" else "all (walsender envelope)"
    server = f"{first_server(spec)} and later"
    options = ", ".join(f"`{o}`" for o in spec.options) or "none"
    parts = [
        f"# {title(spec)}", "",
        spec.doc, "",
        "| At a glance | |", "|---|---|",
        f"| Tag byte | `{spec.tag}` (0x{ord(spec.tag):02X}) |",
        f"| Layer | {'pgoutput message' if spec.layer == 'logical' else 'walsender envelope (CopyData payload)'} |",
        f"| Protocol versions | {versions} |",
        f"| Sent by | {server} |",
        f"| pgoutput options that make the server send it | {options} |",
        f"| Size | {_size_words(lay.record)} |",
        f"| PostgreSQL docs | [{spec.name}]({spec.docs_page}#{spec.doc_ref}) |",
        "", "## Fields", "", field_table(lay.record), "",
        "## Byte layout", "",
        layout_svg(lay.record, f"{spec.name}: one box per field; dashed = conditional; jagged = variable length"),
        "",
    ]
    for nested in nested_records(lay.record):
        if nested.name == "TupleColumn":
            parts += ["Tuple data columns are described on the [TupleData](../dml/tupledata.md) page.", ""]
            continue
        parts += [f"### {nested.name}", "", f"Each element of the array is a {nested.name}:", "",
                  field_table(nested), "", layout_svg(nested, f"{nested.name}"), ""]
    parts += ["## Worked example" + ("s" if len(examples) > 1 else ""), ""]
    for example in examples:
        parts += [example_section(spec, example), ""]
    return "\n".join(parts)


def _size_words(record: walker.Record) -> str:
    size = walker.fixed_size(record)
    if size is not None:
        return f"always {size} bytes"
    return f"variable, at least {walker.min_size(record)} bytes"


def tupledata_page() -> str:
    record = walker.record_node(schema.RECORDS["TupleColumn"])
    return "\n".join([
        "# TupleData", "",
        "A row image inside Insert, Update and Delete: an Int16 column count, then one TupleColumn per column, "
        "in the order of the table's last Relation message. Under `binary`, columns whose type has a binary "
        "send function come as `b`; the others stay `t` in the same row. An unchanged TOASTed value is `u`, "
        "which is not NULL (`n`): the value was simply not sent, and the consumer must keep the one it has.",
        "", "## TupleColumn", "", field_table(record), "",
        layout_svg(record, "TupleColumn: kind, then data only for 't' and 'b'"), "",
    ])


def _checksummed_fields(part: walker.Record) -> walker.Record:
    """The fields of a capture file part (header or record), declared as one field holding a checksummed
    record: those fields are what the page tabulates and draws."""
    inner = part.fields[0].node
    if not (isinstance(inner, walker.Checksummed) and isinstance(inner.node, walker.Record)):
        raise DocsError(f"the capture file part {part.name or part.fields[0].name} is not one checksummed record")
    return inner.node


def capture_format_page() -> str:
    """The capture file format, from its declaration (:mod:`replwire.schema.capture`)."""
    from ...schema import capture

    header = walker.record_node(schema.CAPTURE_FILE["Header"])
    record = walker.record_node(schema.CAPTURE_FILE["Record"])
    header_fields = _checksummed_fields(header)
    record_fields = _checksummed_fields(record)
    option = walker.record_node(capture.OPTION)
    return "\n".join([
        "# Capture file format", "",
        "replwire's capture files hold pgoutput messages exactly as a server sent them, with what is needed to "
        "read them again. `replwire capture` writes them; `replwire decode`, the Python API "
        "(`replwire.codec.io.capture_file`) and the Spark source read them. The layout below is generated from its "
        "declaration in `replwire.schema.capture`.", "",
        "A file is one **header**, then **records** until the end of the file. Header and records each end with "
        "a CRC-32 (zlib's polynomial, big-endian) of their bytes. A reader stops at the first record that is cut "
        "short or fails its checksum — a torn tail after a crash — reports it, and keeps every record before it; "
        "a writer opened on such a file cuts the tail off and appends after the last good record.", "",
        f"The magic is `{capture.MAGIC!r}`; this is format version {capture.FORMAT_VERSION}.", "",
        "## Header", "", field_table(header_fields), "",
        layout_svg(header_fields, "Header fields; a CRC-32 of them follows"), "",
        "Each option:", "", field_table(option), "",
        "## Record", "", field_table(record_fields), "",
        layout_svg(record_fields, "Record fields; a CRC-32 of them follows"), "",
        "A record takes at least "
        f"{walker.min_size(record)} bytes (an empty message); the message is parsed with the header's "
        "`proto_version`, and the stream state follows from the messages before it.", "",
        *snapshot_section(),
    ])


def snapshot_section() -> list[str]:
    """The capture file format page's part on the records that are no pgoutput messages, from their
    declarations (:data:`replwire.schema.capture.CAPTURE_RECORDS`): the snapshot section, SlotConfirmed,
    ColumnDefaults."""
    from ...schema import capture

    lines = [
        "## Snapshot section", "",
        "A capture taken with `replwire capture --snapshot` starts with the initial snapshot: records whose "
        "message is one of the kinds below instead of a pgoutput message. Their first byte (0x01 to 0x06) is "
        "never a pgoutput tag. The section opens with SnapshotBegin (written before the slot is created), then "
        "SnapshotSlot, then per table SnapshotTable, its SnapshotRows records and SnapshotTableEnd, and closes "
        "with SnapshotEnd; only then does the stream follow. Every record after SnapshotSlot has the slot's "
        "consistent point as its `lsn` and 0 as its `xid`. A section without SnapshotEnd was interrupted: "
        "`replwire capture` takes it again from the start (its slot was never read, so nothing is lost). "
        "Format version 2 added the section; readers take version 1 files as they are.", "",
    ]
    for spec in capture.SNAPSHOT_RECORDS:
        node = walker.record_node(spec.declaration)
        lines += [f"### {spec.name}", "", spec.doc, "", field_table(node), ""]
        if spec is capture.SNAPSHOT_TABLE:
            lines += ["Each message:", "", field_table(walker.record_node(capture.SNAPSHOT_SCHEMA_MESSAGE)), ""]
    spec = capture.SLOT_CONFIRMED
    lines += [
        "## Where the slot stood", "",
        f"Format version 3 added one more record kind, {spec.name} (first byte 0x07). "
        "`replwire capture` writes it when it starts streaming (the slot's confirmed position: what the server "
        "sends next completes after it) and, between transactions, before it acknowledges a position that no "
        "record completes (the server's WAL end while nothing in it is for the publication). So every "
        "position the slot is ever confirmed at is one the file completes or names, and a reader of several "
        "files of one slot (`replwire decode`, the Spark jobs, `replwire serve`) refuses a capture that started "
        "past what the records before it reach: the slot moved on over changes no given file holds. Readers "
        "pass over the record otherwise; a version 2 file is a version 3 file without it.", "",
        f"### {spec.name}", "", spec.doc, "", field_table(walker.record_node(spec.declaration)), "",
    ]
    spec = capture.COLUMN_DEFAULTS
    lines += [
        "## Column defaults", "",
        f"Format version 5 added {spec.name} (first byte 0x0b). `ALTER TABLE ... ADD COLUMN ... DEFAULT` with a "
        "default that is not volatile rewrites no row: the server stores the value, and every row that existed "
        "then reads it, while the stream carries those rows only when they change. `replwire capture` reads the "
        "stored defaults from the catalog when the stream announces a table's shape (a Relation message), and "
        "writes them right after it; `spark apply` fills a column added between two shapes of a table with its "
        "stored default in the rows written under the older shape. A default the server wrote into each row "
        "(a volatile one, or the table rewritten before the capture read the catalog) is named, but its values "
        "are not known: the capture and `apply` say so, and a backfill of the table gives them.", "",
        f"### {spec.name}", "", spec.doc, "", field_table(walker.record_node(spec.declaration)), "",
        "Each column:", "", field_table(walker.record_node(capture.COLUMN_DEFAULT)), "",
    ]
    return lines


def version_matrix() -> str:
    versions = range(1, schema.MAX_PROTO_VERSION + 1)
    lines = ["# Version matrix", "",
             "Which messages exist in which protocol version (v1 to "
             f"v{schema.MAX_PROTO_VERSION}), from which PostgreSQL release servers send them, and the "
             "pgoutput options they need. Generated from the declarations.", "",
             '<div class="replwire-compact" markdown>', "",
             "| Message | Tag | " + " | ".join(f"v{v}" for v in versions) + " | Sent since | Options |",
             "|---|:-:|" + ":-:|" * len(versions) + "---|---|"]
    for family in FAMILIES:
        for spec in (s for s in all_specs() if s.family == family):
            link = f"[{spec.name}]({page_path(spec).removeprefix('reference/')})"
            protos = " | ".join("✓" if (spec.layer != "logical" or v >= spec.min_proto) else "–" for v in versions)
            options = ", ".join(f"`{o}`" for o in spec.options) or "–"
            lines.append(f"| {link} | `{spec.tag}` | {protos} | {first_server(spec)} | {options} |")
    lines += ["", "</div>", "", "## Highest protocol version per server", "",
              "| Server | Highest `proto_version` | Adds |", "|---|---|---|"]
    for proto, first in sorted(schema.PROTO_FIRST_SERVER.items()):
        last = schema.PROTO_FIRST_SERVER.get(proto + 1, 0) - 1
        servers = (f"{first} and later" if last < 0 else str(first) if last == first else f"{first}–{last}")
        lines.append(f"| PostgreSQL {servers} | {proto} | {PROTO_ADDS[proto]} |")
    return "\n".join(lines + [""])


def first_server(spec: MessageSpec) -> str:
    """The first PostgreSQL release that sends the message."""
    return f"PostgreSQL {max(spec.since_server, schema.PROTO_FIRST_SERVER[spec.min_proto])}"


def reference_index() -> str:
    lines = ["# Protocol reference", "",
             "One page per message, generated from replwire's declarations when this site is built: the "
             "tables, diagrams and examples cannot drift from the code that parses and builds the bytes.", "",
             "- [Version matrix](versions.md): messages × protocol versions × servers × options.",
             "- [Stream framing](framing.md): how messages follow each other.",
             "- [Streamed transactions](streaming.md): the Xid inside stream blocks, and the Stream Abort tail.",
             "- [Quirks](quirks.md): what the servers do that the PostgreSQL documentation does not say.",
             "- [TupleData](dml/tupledata.md): the row images of Insert, Update and Delete.",
             "- [Capture file format](capture-format.md): how replwire stores captured messages.", ""]
    for family, family_title in FAMILIES.items():
        specs = [s for s in all_specs() if s.family == family]
        lines += [f"## {family_title}", ""]
        lines += [f"- [{s.name}]({page_path(s).removeprefix('reference/')}) `{s.tag}`: "
                  f"{s.doc.split('. ')[0].rstrip('.')}." for s in specs]
        lines.append("")
    return "\n".join(lines)


def pages(examples: Iterable[Example], fallback: Iterable[Example] = ()) -> dict[str, str]:
    """Every generated page, by its path in the site.

    ``examples`` are preferred (real captures); ``fallback`` examples are used only for a message that has
    none there (the client's envelope messages, which no server sends).
    """
    examples, fallback = list(examples), list(fallback)
    out = {"reference/index.md": reference_index(), "reference/versions.md": version_matrix(),
           "reference/dml/tupledata.md": tupledata_page(), "reference/capture-format.md": capture_format_page()}
    for spec in all_specs():
        out[page_path(spec)] = message_page(spec, pick_examples(spec, examples) or pick_examples(spec, fallback))
    missing = [s.name for s in all_specs() if page_path(s) not in out]
    if missing:
        raise DocsError(f"messages without a page: {missing}")
    return out


#: A part of the site's navigation: pages by title, and sections (a title and its pages).
Nav = list[dict[str, str | list[dict[str, str]]]]


def nav() -> Nav:
    """The reference section of the site's navigation."""
    section: Nav = [{"Overview": "reference/index.md"}, {"Version matrix": "reference/versions.md"},
                     {"Stream framing": "reference/framing.md"}, {"Streamed transactions": "reference/streaming.md"},
                     {"Quirks": "reference/quirks.md"}, {"Capture file format": "reference/capture-format.md"}]
    for family, family_title in FAMILIES.items():
        entries = [{s.name: page_path(s)} for s in all_specs() if s.family == family]
        if family == "dml":
            entries.append({"TupleData": "reference/dml/tupledata.md"})
        section.append({family_title: entries})
    return section


# ---------------------------------------------------------------------------------------------------------
# the framing diagram

#: The sequences a consumer sees, as rows of (label, optional, repeated) boxes.
FRAMING = [
    ("A transaction, sent after it committed",
     [("Begin B", False, False), ("Origin O", True, False), ("Relation R · Type Y · Insert I · Update U · "
      "Delete D · Truncate T · Message M", False, True), ("Commit C", False, False)]),
    ("A streamed transaction (protocol 2+, streaming on/parallel)",
     [("Stream Start S", False, False), ("Origin O (first block)", True, False), ("R · Y · I · U · D · T · M, "
      "each with the Xid", False, True), ("Stream Stop E", False, False), ("Stream Abort A (subxact)", True, True),
      ("Stream Commit c · Stream Abort A · Stream Prepare p", False, False)]),
    ("A prepared transaction (protocol 3+, two_phase)",
     [("Begin Prepare b", False, False), ("Origin O", True, False), ("R · Y · I · U · D · T · M", False, True),
      ("Prepare P", False, False), ("later: Commit Prepared K · Rollback Prepared r", False, False)]),
    ("Outside any transaction",
     [("Message M (non-transactional)", False, False)]),
]


def _wrap(label: str, chars: int) -> list[str]:
    """``label`` in lines of about ``chars`` characters, breaking between its `` · ``-separated items (each
    keeps its dot), and inside an item only when it is longer than a line by itself."""
    items = label.split(" · ")
    tokens: list[str] = []
    for k, item in enumerate(items):
        dot = " ·" if k < len(items) - 1 else ""
        words = [item] if len(item + dot) <= chars else item.split(" ")
        tokens += [*words[:-1], words[-1] + dot]
    lines: list[str] = []
    for token in tokens:
        if lines and len(lines[-1]) + 1 + len(token) <= chars:
            lines[-1] += " " + token
        else:
            lines.append(token)
    return lines


def framing_svg() -> str:
    width, line_height = 860, 15
    rows = []
    for caption, boxes in FRAMING:
        box_width = (width - 20 - 18 * (len(boxes) - 1)) / len(boxes)
        labels = [_wrap(label, int(box_width / 7.2)) for label, _, _ in boxes]
        rows.append((caption, boxes, box_width, labels, max(3, *map(len, labels)) * line_height + 10))
    height = 10 + sum(box_height + 50 for *_, box_height in rows)
    out = [f'<svg class="replwire-framing" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="stream framing">',
           '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
           '<path d="M0,0 L8,4 L0,8 z" fill="#37474f"/></marker></defs>']
    y = 14
    for caption, boxes, box_width, labels, box_height in rows:
        out.append(f'<text x="10" y="{y + 10}" font-size="14" font-weight="bold" fill="currentColor">'
                   f'{html.escape(caption)}</text>')
        middle = y + 20 + box_height / 2
        x: float = 10
        for i, ((_, optional, repeated), lines) in enumerate(zip(boxes, labels)):
            dash = ' stroke-dasharray="5 3"' if optional else ""
            out.append(f'<rect x="{x:.0f}" y="{y + 20}" width="{box_width:.0f}" height="{box_height}" rx="6" '
                       f'fill="#e8f5e9" stroke="#37474f"{dash}/>')
            for k, text in enumerate(lines):
                baseline = middle + 5 + line_height * k - line_height / 2 * (len(lines) - 1)
                out.append(f'<text x="{x + box_width / 2:.0f}" y="{baseline:g}" '
                           f'font-size="13" text-anchor="middle" fill="#102027">{html.escape(text)}</text>')
            if repeated:
                out.append(f'<text x="{x + box_width - 4:.0f}" y="{y + box_height + 36}" font-size="12" '
                           f'text-anchor="end" fill="currentColor">repeated</text>')
            if i < len(boxes) - 1:
                out.append(f'<line x1="{x + box_width:.0f}" y1="{middle:g}" x2="{x + box_width + 16:.0f}" '
                           f'y2="{middle:g}" stroke="#37474f" marker-end="url(#arrow)"/>')
            x += box_width + 18
        y += box_height + 50
    out.append("</svg>")
    return "".join(out)
