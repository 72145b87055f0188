"""What a capture file holds of its backfills: each table's last run, the requests not answered yet, and the
request messages themselves.

Strategy: one pass over the file (:func:`read_state`), reading only the backfill's records and the logical
messages (every other record is checked and passed over), gives everything a capture needs to go on from
where the file ends -- each run's next chunk, cursor and keys to read again, and the requests for its slot
that no run answered -- and everything ``replwire backfill --status`` prints.  A request is a transactional
logical message of prefix ``replwire.backfill`` naming a slot (:func:`request`); a capture that refuses one
says so in a message of the same prefix (:func:`refusal`), so that the file answers it either way.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...schema.capture import BACKFILL_PREFIX
from ..errors import DecodeError
from ..messages import Message
from ..stream import snapshot_records
from ..stream.backfill_window import Key
from ..wire.fast import parse
from .capture_file import read_capture

__all__ = ["FileState", "HeldRun", "Request", "read_state", "refusal", "request", "request_of", "status_lines"]

_PREFIX_BYTES = BACKFILL_PREFIX.encode() + b"\x00"
#: What the pass reads: the backfill's records and logical messages; every other kind is passed over.
_READ = frozenset((snapshot_records.CHUNK, snapshot_records.CHUNK_ROWS, snapshot_records.RUN_END, 0x4D))
_SKIP = frozenset(range(256)) - _READ


@dataclass
class HeldRun:
    """A table's last backfill run in a file: its run number, the next chunk's number, the cursor (the key
    texts of the last row read; ``None``: none yet, or every key read), the rows written, whether it ended,
    and the keys to read again."""

    run: int
    chunk: int = 0
    cursor: list[str] | None = None
    rows: int = 0
    ended: bool = False
    refetch: list[Key] = field(default_factory=list)
    name: str = ""
    seconds: float = 0.0  # of reading, in the run's chunks


@dataclass
class Request:
    """A request for a backfill (``tables`` empty: every published table), and its answer so far: the tables
    backfilled since it, or why it was refused."""

    id: str
    slot: str
    tables: list[str]
    since: set[str] = field(default_factory=set)
    refused: str | None = None

    @property
    def answered(self) -> bool:
        return self.refused is not None or bool(self.since if not self.tables else self.since & set(self.tables))


@dataclass
class FileState:
    """:func:`read_state`'s answer: runs by table OID, requests in the file's order, and the slot the file's
    header names (``""``: none)."""

    runs: dict[int, HeldRun]
    requests: list[Request]
    slot: str = ""

    def pending(self, slot: str) -> list[Request]:
        """The requests for ``slot`` that nothing in the file answers."""
        return [r for r in self.requests if r.slot == slot and not r.answered]


def read_state(path: str) -> FileState:
    """What the capture file ``path`` holds of backfills.  A chunk counts only when all its rows are in the
    file (a chunk cut short at the file's end is read again: its rows that are there are true rows, and are
    replaced)."""
    runs: dict[int, HeldRun] = {}
    requests: list[Request] = []
    by_id: dict[str, Request] = {}
    pending: tuple[Any, str, int] | None = None  # (the chunk's fields, its table, rows still to come)
    with read_capture(path) as reader:
        proto, encoding = reader.header.proto_version, reader.header.client_encoding
        slot = reader.header.slot_name or ""
        reading = reader.records(raw=True, skip=_SKIP)
        try:
            for _, _, _, data, _ in reading:
                code = data[0] if data else -1
                if code == snapshot_records.CHUNK:
                    fields = snapshot_records.parse_record(data)
                    name = _chunk_table(fields, encoding)
                    pending = (fields, name, fields.rows)
                    for asked in requests:
                        asked.since.add(name)
                elif code == snapshot_records.CHUNK_ROWS:
                    if pending is not None:
                        pending = (*pending[:2], pending[2] - snapshot_records.parse_record(data).rows)
                elif code == snapshot_records.RUN_END:
                    fields = snapshot_records.parse_record(data)
                    held = runs.get(fields.relation_id)
                    if held is None or held.run != fields.run:
                        held = runs[fields.relation_id] = HeldRun(fields.run, name=held.name if held else "")
                    held.chunk, held.rows, held.ended, held.refetch = fields.chunks, fields.rows, True, []
                    continue
                elif code == 0x4D:
                    found = _message_content(data, proto, encoding)
                    if found is None:
                        continue
                    made = _request(*found)
                    if made is not None:
                        requests.append(made)
                        by_id[made.id] = made
                    elif found[1].get("k") == "refused" and str(found[1].get("id")) in by_id:
                        by_id[str(found[1]["id"])].refused = str(found[1].get("why") or "refused")
                    continue
                if pending is not None and pending[2] == 0:
                    chunk, name, _ = pending
                    held = runs.get(chunk.relation_id)
                    if held is None or held.run != chunk.run:
                        held = runs[chunk.relation_id] = HeldRun(chunk.run)
                    held.chunk, held.rows = chunk.chunk + 1, held.rows + chunk.rows
                    held.cursor = json.loads(chunk.cursor) if chunk.cursor else None
                    held.ended, held.refetch = bool(chunk.last), keys_of(chunk.refetch)
                    held.name, held.seconds = name, held.seconds + chunk.read_us / 1e6
                    pending = None
        finally:
            reading.close()
    return FileState(runs, requests, slot)


def request(slot: str, tables: Sequence[str]) -> str:
    """The content of a request to the capture on ``slot`` to backfill ``tables`` (none: every published
    table), as ``replwire backfill`` emits it in a transactional logical message."""
    return json.dumps({"v": 1, "k": "request", "slot": slot, "tables": list(tables), "id": uuid.uuid4().hex},
                      separators=(",", ":"))


def refusal(session: str, request_id: str, why: str) -> str:
    """The content of the message a capture writes when it refuses the request ``request_id``."""
    return json.dumps({"v": 1, "s": session, "k": "refused", "id": request_id, "why": why}, separators=(",", ":"))


def _message_content(data: bytes, proto_version: int, encoding: str) -> tuple[bool, dict[str, Any]] | None:
    """Whether a pgoutput logical message of the backfill's prefix is transactional, and its JSON content
    (``None`` for any other message)."""
    if data[:1] != b"M" or _PREFIX_BYTES not in data:
        return None
    for in_stream in (False, True):
        try:
            message = parse(data, proto_version=proto_version, in_stream=in_stream, encoding=encoding)
        except DecodeError:
            continue
        if isinstance(message, Message) and message.prefix == BACKFILL_PREFIX:
            try:
                content = json.loads(bytes(message.content))
            except ValueError:
                return None
            if isinstance(content, dict) and content.get("v") == 1:
                return message.is_transactional, content
        return None
    return None


def request_of(data: bytes, proto_version: int, encoding: str) -> Request | None:
    """The request a pgoutput message is, if it is one."""
    found = _message_content(data, proto_version, encoding)
    return _request(*found) if found is not None else None


def _request(transactional: bool, content: dict[str, Any]) -> Request | None:
    """The request a backfill message's content is, if it is one: transactional, ``"k": "request"``, naming
    a slot."""
    if not transactional or content.get("k") != "request" or not isinstance(content.get("slot"), str):
        return None
    return Request(str(content.get("id") or ""), content["slot"], [str(t) for t in content.get("tables") or []])


def status_lines(path: str) -> list[str]:
    """What the capture file ``path`` holds of its backfills, a line per table: its last run's chunks, rows
    and pace, and whether it ended; then the requests no backfill answered yet, and those refused."""
    state = read_state(path)
    lines = []
    for oid, held in sorted(state.runs.items(), key=lambda item: item[1].name):
        if held.ended:
            what = "done"
        elif held.refetch:
            what = f"running ({len(held.refetch)} moved rows to read again)"
        else:
            what = "running"
        pace = f", {held.rows / held.seconds:,.0f} rows/s of reading" if held.seconds else ""
        lines.append(f"{held.name or f'relation {oid}'}: {what}, run {held.run}: {held.rows:,} rows in "
                     f"{held.chunk:,} chunks{pace}")
    for asked in state.requests:
        if asked.slot != state.slot:
            continue
        tables = ", ".join(asked.tables) or "every published table"
        if asked.refused is not None:
            lines.append(f"{tables}: refused: {asked.refused}")
        elif not asked.answered:
            lines.append(f"{tables}: requested, not begun")
    return lines


def keys_of(text: str) -> list[Key]:
    """Keys from their JSON (each an array of hex texts or nulls)."""
    return [tuple(None if v is None else bytes.fromhex(v) for v in key) for key in json.loads(text)] if text else []


def keys_json(keys: Sequence[Key]) -> str:
    """The JSON of keys (each an array of hex texts or nulls), as ``BackfillChunk`` holds them."""
    return json.dumps([[None if v is None else v.hex() for v in key] for key in keys]) if keys else ""


def _chunk_table(fields: Any, encoding: str) -> str:
    """The ``schema.table`` of a parsed ``BackfillChunk`` (its last schema message is the Relation)."""
    relation = snapshot_records.schema_message(fields.messages[-1].data, encoding)
    return f"{getattr(relation, 'namespace', '') or 'pg_catalog'}.{relation.name}"
