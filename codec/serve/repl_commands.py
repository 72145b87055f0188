"""The commands a replication=database connection sends, read from a simple query's text: the job of
PostgreSQL's ``repl_gram.y`` and ``repl_scanner.l``, whose name it takes.

Strategy: a small tokenizer (identifiers, quoted identifiers, string literals, LSNs ``X/Y``, numbers,
punctuation) and one reader per replication command of the walsender's grammar: ``IDENTIFY_SYSTEM``,
``START_REPLICATION SLOT s LOGICAL X/Y (options)``, ``CREATE_REPLICATION_SLOT``,
``DROP_REPLICATION_SLOT``, ``ALTER_REPLICATION_SLOT``, ``SHOW``.  Plain SQL is recognised only in the
forms a PostgreSQL subscriber, ``pg_recvlogical``, psycopg and ``replwire capture`` send while they set up
(the secure ``search_path``, the publication's tables, the publications that exist, a setting, one slot's
row of ``pg_replication_slots``): :func:`read_query` says which,
with the select list's width, and anything else is :class:`UnknownCommand`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import UnknownCommand

__all__ = [
    "AlterSlot", "CreateSlot", "DropSlot", "IdentifySystem", "PublicationNames", "PublicationTables",
    "SetConfig", "Setting", "Show", "SlotRow", "StartReplication", "read_query",
]


@dataclass(frozen=True)
class IdentifySystem:
    pass


@dataclass(frozen=True)
class StartReplication:
    slot: str
    lsn: int
    options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CreateSlot:
    slot: str
    plugin: str | None  # None: a physical slot
    temporary: bool = False


@dataclass(frozen=True)
class DropSlot:
    slot: str


@dataclass(frozen=True)
class AlterSlot:
    slot: str


@dataclass(frozen=True)
class Show:
    name: str


@dataclass(frozen=True)
class SetConfig:
    """``SELECT pg_catalog.set_config('search_path', '', false)`` and the like: one row, the value set."""

    value: str


@dataclass(frozen=True)
class PublicationTables:
    """A query for the tables of publications: answered with one row per table, ``columns`` wide."""

    columns: tuple[str, ...]


@dataclass(frozen=True)
class PublicationNames:
    """A query for which of the named publications exist."""

    column: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Setting:
    """``SELECT current_setting('name')``: one row, the setting's value."""

    name: str
    column: str


@dataclass(frozen=True)
class SlotRow:
    """A query of ``pg_replication_slots`` for one slot (``WHERE slot_name = '...'``): one row, an item per
    entry of ``fields`` (each item's first word: ``plugin``, ``confirmed_flush_lsn``, ...)."""

    slot: str
    columns: tuple[str, ...]
    fields: tuple[str, ...]


Command = (IdentifySystem | StartReplication | CreateSlot | DropSlot | AlterSlot | Show | SetConfig
           | PublicationTables | PublicationNames | Setting | SlotRow)

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<lsn>[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8})
  | (?P<number>-?\d+(?:\.\d+)?)
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<string>[Ee]?'(?:[^']|'')*')
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<operator>->>?|[<>!]=|<>)
  | (?P<punct>[(),;.=*:\[\]<>])
""", re.VERBOSE)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str

    @property
    def value(self) -> str:
        if self.kind == "quoted":
            return self.text[1:-1].replace('""', '"')
        if self.kind == "string":
            body = self.text[1:] if self.text[0] in "eE" else self.text
            return body[1:-1].replace("''", "'")
        if self.kind == "word":
            return self.text.lower()
        return self.text


def _tokens(text: str) -> list[_Token]:
    out, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise UnknownCommand(f"syntax error at or near \"{text[position:position + 20]}\"")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            out.append(_Token(kind, match.group()))
        position = match.end()
    while out and out[-1].text == ";":
        out.pop()
    return out


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


class _Reader:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens, self.i = tokens, 0

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, what: str = "a token") -> _Token:
        token = self.peek()
        if token is None:
            raise UnknownCommand(f"syntax error: {what} expected at the end")
        self.i += 1
        return token

    def accept(self, word: str) -> bool:
        token = self.peek()
        if token is not None and token.kind == "word" and token.value == word:
            self.i += 1
            return True
        return False

    def name(self) -> str:
        token = self.take("a name")
        if token.kind not in ("word", "quoted"):
            raise UnknownCommand(f"syntax error at or near \"{token.text}\"")
        return token.value

    def end(self) -> None:
        token = self.peek()
        if token is not None:
            raise UnknownCommand(f"syntax error at or near \"{token.text}\"")

    def options(self) -> dict[str, str]:
        """``( name [value] [, ...] )`` or the legacy unparenthesised ``name value`` words."""
        out: dict[str, str] = {}
        if self.peek() is None:
            return out
        if self.take().text != "(":
            raise UnknownCommand(f"syntax error at or near \"{self.tokens[self.i - 1].text}\"")
        while True:
            name = self.name()
            token = self.take("an option value or )")
            if token.text in (",", ")"):
                out[name] = "true"
            else:
                out[name] = token.value
                token = self.take(", or )")
            if token.text == ")":
                break
            if token.text != ",":
                raise UnknownCommand(f"syntax error at or near \"{token.text}\"")
        self.end()
        return out


def read_query(text: str) -> Command:
    """The command ``text`` is; :class:`UnknownCommand` for anything this server does not run."""
    tokens = _tokens(text)
    if not tokens:
        raise UnknownCommand("empty query")
    reader = _Reader(tokens)
    head = reader.take().value
    if head == "identify_system":
        reader.end()
        return IdentifySystem()
    if head == "start_replication":
        if not reader.accept("slot"):
            raise UnknownCommand("physical replication is not served: START_REPLICATION SLOT s LOGICAL X/Y", "0A000")
        slot = reader.name()
        if not reader.accept("logical"):
            raise UnknownCommand("physical replication is not served: only LOGICAL replication", "0A000")
        lsn = reader.take("an LSN")
        if lsn.kind != "lsn":
            raise UnknownCommand(f"syntax error at or near \"{lsn.text}\"")
        return StartReplication(slot, parse_lsn(lsn.text), reader.options())
    if head == "create_replication_slot":
        slot = reader.name()
        temporary = reader.accept("temporary")
        if reader.accept("physical"):
            return CreateSlot(slot, None, temporary)
        if not reader.accept("logical"):
            raise UnknownCommand("syntax error: LOGICAL or PHYSICAL expected")
        return CreateSlot(slot, reader.name(), temporary)
    if head == "drop_replication_slot":
        return DropSlot(reader.name())
    if head == "alter_replication_slot":
        return AlterSlot(reader.name())
    if head == "show":
        name = reader.name()
        reader.end()
        return Show(name)
    if head in ("timeline_history", "base_backup", "read_replication_slot", "upload_manifest"):
        raise UnknownCommand(f"{head.upper()} is not served: this server plays logical replication only", "0A000")
    if head == "select":
        return _select(text, tokens)
    raise UnknownCommand(f"syntax error at or near \"{tokens[0].text}\"")


def _select_list(tokens: list[_Token]) -> list[list[_Token]]:
    """The top-level items between SELECT [DISTINCT] and FROM (or the end)."""
    items: list[list[_Token]] = [[]]
    depth = 0
    for token in tokens[1:]:
        if depth == 0 and token.kind == "word" and token.value == "from":
            break
        if depth == 0 and not items[0] and token.kind == "word" and token.value == "distinct":
            continue
        if token.text == "(":
            depth += 1
        elif token.text == ")":
            depth -= 1
        if depth == 0 and token.text == ",":
            items.append([])
        else:
            items[-1].append(token)
    return items


def _column_name(item: list[_Token]) -> str:
    names = [t.value for t in item if t.kind in ("word", "quoted")]
    if len(item) >= 2 and item[-2].kind == "word" and item[-2].value == "as":
        return item[-1].value
    if item and item[0].kind in ("word", "quoted") and "(" not in [t.text for t in item]:
        return names[-1]
    for t in item:  # a function call: its name, as PostgreSQL names such a column
        if t.kind == "word" and t.value != "pg_catalog":
            return t.value
    return "?column?"


def _select(text: str, tokens: list[_Token]) -> Command:
    words = {t.value for t in tokens if t.kind == "word"}
    items = _select_list(tokens)
    columns = tuple(_column_name(item) for item in items)
    if "set_config" in words and len(items) == 1:
        strings = [t.value for t in tokens if t.kind == "string"]
        return SetConfig(strings[1] if len(strings) >= 2 else "")
    if "pg_publication_tables" in words or "pg_get_publication_tables" in words:
        return PublicationTables(columns)
    if "current_setting" in words and len(items) == 1:
        strings = [t.value for t in tokens if t.kind == "string"]
        if strings:
            return Setting(strings[0], columns[0])
    if "pg_replication_slots" in words:
        for i, token in enumerate(tokens[:-2]):
            if (token.kind == "word" and token.value == "slot_name" and tokens[i + 1].text == "="
                    and tokens[i + 2].kind == "string"):
                fields = tuple(next((t.value for t in item if t.kind == "word"), "?column?") for item in items)
                return SlotRow(tokens[i + 2].value, columns, fields)
    if "pg_publication" in words and len(items) == 1:
        return PublicationNames(columns[0], tuple(t.value for t in tokens if t.kind == "string"))
    raise UnknownCommand(f"this server answers only the queries a logical replication client sends while it "
                         f"sets up; not: {text.strip()[:200]}", "0A000")
