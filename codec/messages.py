"""The message classes: one per message of the PostgreSQL documentation, fields from the declarations.

Strategy: each class below names its declaration (``spec=``); ``_Declared.__init_subclass__`` turns the
declaration's value fields into dataclass fields (keyword-only), so a field list is never written twice,
and the metaclass gives each class one slot per field (``__slots__`` must exist before the class does).
Fields that are conditional on the wire (the streamed-transaction ``xid``, the old-row images, the Stream
Abort tail) default to ``None``; always-zero flags default to 0.  Values are converted once, at the
boundary: LSN fields become [LSN][replwire.codec.LSN], timestamps [Timestamp][replwire.codec.Timestamp],
nested records [RelationColumn][replwire.codec.RelationColumn] and [TupleColumn][replwire.codec.TupleColumn].
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from construct import Construct, FormatField, Struct

from ..schema import dml, envelope, logical_message, relation, stream, transaction, twophase
from ..schema.constructs import Counted, Items, Marked, MustBeZero, Tail, When
from ..schema.fields import Field
from ..schema.message_spec import MessageSpec
from ..schema.wire_error import WireError, annotate, location
from .errors import EncodeError
from .scalars import LSN, Timestamp

__all__ = [
    "Begin", "BeginPrepare", "Commit", "CommitPrepared", "Delete", "HotStandbyFeedback", "Insert", "Message", "Origin",
    "Prepare", "PrimaryKeepalive", "Record", "Relation", "RelationColumn", "RollbackPrepared", "StandbyStatusUpdate",
    "StreamAbort", "StreamCommit", "StreamPrepare", "StreamStart", "StreamStop", "Truncate", "TupleColumn", "Type",
    "Update", "WireMessage", "XLogData", "value_fields",
]

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:
    from typing_extensions import dataclass_transform

_RECORD_CLASSES: dict[int, type[Record]] = {}
_D = TypeVar("_D", bound="_Declared")

_SCALAR_TYPES: dict[str, type] = {
    "lsn": LSN, "timestamp": Timestamp, "xid": int, "oid": int, "int": int, "text": str, "char": str,
    "bytes": bytes,
}


def value_fields(declaration: Struct) -> list[Field]:
    """The fields of a declaration that are attributes of its class (not the tag, not derived counts)."""
    return [sc for sc in declaration.subcons
            if isinstance(sc, Field) and sc.meta.value not in ("tag", "count")]


def strip_presence(subcon: Construct) -> Construct:
    """The construct under the presence wrappers (When, Tail, Marked) of a field."""
    while isinstance(subcon, (When, Tail, Marked)):
        subcon = subcon.subcon
    return subcon


def is_optional(f: Field) -> bool:
    """Whether the field can be absent (its value ``None``)."""
    sc = f.subcon
    while isinstance(sc, (When, Tail, Marked)):
        if isinstance(sc, (When, Tail)) or sc.optional:
            return True
        sc = sc.subcon
    return False


def _int_bounds(construct: Construct) -> tuple[int, int, str] | None:
    if not isinstance(construct, FormatField):
        return None
    code = construct.fmtstr[-1]
    bits = {"B": 8, "b": 8, "H": 16, "h": 16, "L": 32, "l": 32, "Q": 64, "q": 64}[code]
    if code.isupper():
        return 0, 2**bits - 1, f"unsigned {bits}-bit"
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1, f"signed {bits}-bit"


def _converters(f: Field) -> tuple[Callable[[Any], Any], Callable[[Any], Any], Any]:
    """(wire value -> Python value, Python value -> wire value, annotation) for one field."""
    core = strip_presence(f.subcon)
    if isinstance(core, (Counted, Items)):
        element = core.subcon
        if isinstance(element, Struct):
            cls = _RECORD_CLASSES[id(element)]

            def load_items(values: list[Any] | None, cls: type[Record] = cls) -> list[Record] | None:
                return None if values is None else [cls._from_wire(v) for v in values]

            def dump_items(values: object, cls: type[Record] = cls) -> list[dict[str, Any]] | None:
                if values is None:
                    return None
                if not isinstance(values, (list, tuple)):
                    raise WireError(f"expected a list of {cls.__name__}, got {type(values).__name__}")
                out = []
                for index, item in enumerate(values):
                    try:
                        if not isinstance(item, cls):
                            raise WireError(f"expected {cls.__name__}, got {type(item).__name__}")
                        out.append(item._to_wire())
                    except WireError as failure:
                        annotate(failure, index=index)
                        raise
                return out

            return load_items, dump_items, types.GenericAlias(list, (cls,))
        check = _scalar_check(element, "int")

        def dump_ints(values: object, check: Callable[[object], None] = check) -> list[Any] | None:
            if values is None:
                return None
            if not isinstance(values, (list, tuple)):
                raise WireError(f"expected a list, got {type(values).__name__}")
            for index, item in enumerate(values):
                try:
                    check(item)
                except WireError as failure:
                    annotate(failure, index=index)
                    raise
            return list(values)

        return (lambda values: None if values is None else list(values)), dump_ints, list[int]
    kind = f.meta.value
    py_type = _SCALAR_TYPES[kind]
    check = _scalar_check(core, kind)

    def load(value: Any, py_type: type = py_type) -> Any:
        return value if value is None or py_type in (int, str, bytes) else py_type(value)

    def dump(value: Any, check: Callable[[object], None] = check) -> Any:
        if value is not None:
            check(value)
            if kind == "bytes":  # bytearray and memoryview are accepted, and built as bytes
                value = bytes(value)
        return value

    return load, dump, py_type


def _scalar_check(construct: Construct, kind: str) -> Callable[[object], None]:
    if isinstance(construct, MustBeZero):  # an int first (not 0.0 or "0"), then the construct wants 0
        construct = construct.subcon
    bounds = _int_bounds(construct)
    if bounds is not None:
        low, high, label = bounds

        def check_int(value: object) -> None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise WireError(f"expected int, got {type(value).__name__}")
            if not low <= value <= high:
                raise WireError(f"{value} is out of range for {label} ({low} to {high})")

        return check_int
    kinds: dict[str, type | tuple[type, ...]] = {"text": str, "char": str, "bytes": (bytes, bytearray, memoryview)}
    expected = kinds.get(kind)

    def check_type(value: object) -> None:
        if expected is not None and not isinstance(value, expected):
            name = expected.__name__ if isinstance(expected, type) else "bytes"
            raise WireError(f"expected {name}, got {type(value).__name__}")

    return check_type


def _required(dump: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``dump`` for a field that is always on the wire: ``None`` is refused by name."""

    def dump_required(value: object) -> Any:
        if value is None:
            raise WireError("a value is required")
        return dump(value)

    return dump_required


class _DeclaredType(type):
    """The metaclass of messages and records: a class that names its declaration (``spec=`` or ``record=``)
    gets one ``__slots__`` entry per value field, which must exist before the class does (so instances are
    small and quick to fill in, and have no ``__dict__``)."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any) -> _DeclaredType:
        declaration = kwargs["spec"].declaration if kwargs.get("spec") is not None else kwargs.get("record")
        if declaration is not None:
            namespace["__slots__"] = tuple(f.name for f in value_fields(declaration))
        return super().__new__(mcs, name, bases, namespace, **kwargs)


@dataclass_transform(kw_only_default=True)
class _Declared(metaclass=_DeclaredType):
    """Shared machinery of messages and records: dataclass fields generated from a declaration.

    For type checkers, a subclass is a keyword-only dataclass whose fields are those its
    ``if TYPE_CHECKING:`` block lists; :mod:`replwire.codec.wire.gen.annotations` writes the blocks from
    the fields the classes get here."""

    __slots__ = ()
    _declaration: ClassVar[Struct]
    _fields: ClassVar[tuple[tuple[str, Callable[[Any], Any], Callable[[Any], Any]], ...]]

    @classmethod
    def _setup(cls, declaration: Struct) -> None:
        cls._declaration = declaration
        annotations: dict[str, Any] = {}
        fields = []
        # dataclass() reads a field's default from the class attribute of its name, where the slot's
        # descriptor is: a Field placeholder stands in for it while dataclass() runs
        slots = {f.name: cls.__dict__[f.name] for f in value_fields(declaration)}
        for f in value_fields(declaration):
            load, dump, annotation = _converters(f)
            if not is_optional(f) and not isinstance(strip_presence(f.subcon), MustBeZero):
                dump = _required(dump)
            fields.append((f.name, load, dump))
            if is_optional(f):
                annotations[f.name] = annotation | None
                setattr(cls, f.name, dataclasses.field(default=None))
            elif isinstance(strip_presence(f.subcon), MustBeZero):
                annotations[f.name] = annotation
                setattr(cls, f.name, dataclasses.field(default=0))
            else:
                annotations[f.name] = annotation
        cls.__annotations__ = annotations
        cls._fields = tuple(fields)
        dataclasses.dataclass(cls, kw_only=True)
        for name, descriptor in slots.items():
            setattr(cls, name, descriptor)

    # pickling and copying: the state is ``{field: value}``, not the slots, so every pickle protocol works
    # and a pickle does not depend on how instances store their fields
    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name, _, _ in self._fields}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    @classmethod
    def _from_wire(cls: type[_D], raw: Any) -> _D:
        return cls(**{name: load(raw[name]) for name, load, _ in cls._fields})

    def _to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, _, dump in self._fields:
            try:
                out[name] = dump(getattr(self, name))
            except WireError as failure:
                annotate(failure, name=name)
                raise
        return out


class Record(_Declared):
    """A nested record of a message (a Relation column, a tuple column): a slotted dataclass, like the messages."""

    __slots__ = ()

    def __init_subclass__(cls, record: Struct | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if record is not None:
            cls._setup(record)
            _RECORD_CLASSES[id(record)] = cls


class WireMessage(_Declared):
    """Base of every message class (logical and envelope).

    ``spec`` is the declaration's ``replwire.schema.MessageSpec``; ``tag`` its tag character."""

    __slots__ = ()
    spec: ClassVar[MessageSpec]
    tag: ClassVar[str]

    def __init_subclass__(cls, spec: MessageSpec | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if spec is not None:
            cls.spec = spec
            cls.tag = spec.tag
            if cls.__dict__.get("__doc__") is None:  # before dataclass(), which would put its signature there
                cls.__doc__ = _docstring(spec)
            cls._setup(spec.declaration)

    def to_wire(self) -> dict[str, Any]:
        """The message as the dict its construct declaration builds from (values checked)."""
        try:
            wire_values = self._to_wire()
        except WireError as failure:
            raise EncodeError(failure.reason, message=type(self).__name__, field=location(failure)[1]) from None
        wire_values["tag"] = None
        return wire_values


def _docstring(spec: MessageSpec) -> str:
    lines = [f"{spec.name} ``{spec.tag}``: {spec.doc}", "", "Attributes:"]
    for f in value_fields(spec.declaration):
        lines.append(f"    {f.name}: {f.meta.doc}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# records


class RelationColumn(Record, record=relation.RELATION_COLUMN):
    """One column of a [Relation][replwire.codec.messages.Relation]: flags, name, type_id, type_modifier."""

    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        flags: int
        name: str
        type_id: int
        type_modifier: int

    @property
    def is_key(self) -> bool:
        """Whether the column is part of the replica identity key (flags bit 0)."""
        return bool(self.flags & 1)


class TupleColumn(Record, record=dml.TUPLE_COLUMN):
    """One column of tuple data: ``kind`` is ``'n'`` (NULL), ``'u'`` (unchanged TOASTed value, not sent),
    ``'t'`` (text) or ``'b'`` (binary); ``data`` the value's bytes for ``'t'``/``'b'``, else ``None``."""

    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        kind: str
        data: bytes | None = None

    @classmethod
    def null(cls) -> TupleColumn:
        return cls(kind="n", data=None)

    @classmethod
    def unchanged_toast(cls) -> TupleColumn:
        return cls(kind="u", data=None)

    @classmethod
    def text(cls, value: str | bytes) -> TupleColumn:
        """A text-format value (``str`` is encoded as UTF-8)."""
        return cls(kind="t", data=value.encode("utf-8") if isinstance(value, str) else bytes(value))

    @classmethod
    def binary(cls, value: bytes) -> TupleColumn:
        return cls(kind="b", data=bytes(value))

    @property
    def is_null(self) -> bool:
        return self.kind == "n"

    @property
    def is_unchanged_toast(self) -> bool:
        return self.kind == "u"


# ---------------------------------------------------------------------------------------------------------
# logical messages


class Begin(WireMessage, spec=transaction.BEGIN):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        final_lsn: LSN
        commit_time: Timestamp
        xid: int


class Commit(WireMessage, spec=transaction.COMMIT):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        flags: int = 0
        commit_lsn: LSN
        end_lsn: LSN
        commit_time: Timestamp


class Origin(WireMessage, spec=transaction.ORIGIN):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        origin_lsn: LSN
        name: str


class Relation(WireMessage, spec=relation.RELATION):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int | None = None
        relation_id: int
        namespace: str
        name: str
        replica_identity: str
        columns: list[RelationColumn]


class Type(WireMessage, spec=relation.TYPE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int | None = None
        type_id: int
        namespace: str
        name: str


class Insert(WireMessage, spec=dml.INSERT):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int | None = None
        relation_id: int
        new: list[TupleColumn]


class Update(WireMessage, spec=dml.UPDATE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int | None = None
        relation_id: int
        key: list[TupleColumn] | None = None
        old: list[TupleColumn] | None = None
        new: list[TupleColumn]


class Delete(WireMessage, spec=dml.DELETE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int | None = None
        relation_id: int
        key: list[TupleColumn] | None = None
        old: list[TupleColumn] | None = None


class Truncate(WireMessage, spec=dml.TRUNCATE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int | None = None
        options: int
        relation_ids: list[int]

    @property
    def cascade(self) -> bool:
        """TRUNCATE ... CASCADE (options bit 0)."""
        return bool(self.options & 1)

    @property
    def restart_identity(self) -> bool:
        """TRUNCATE ... RESTART IDENTITY (options bit 1)."""
        return bool(self.options & 2)


class Message(WireMessage, spec=logical_message.MESSAGE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int | None = None
        flags: int
        lsn: LSN
        prefix: str
        content: bytes

    @property
    def is_transactional(self) -> bool:
        """Whether the message was emitted as transactional (flags bit 0)."""
        return bool(self.flags & 1)


class StreamStart(WireMessage, spec=stream.STREAM_START):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int
        first_segment: int

    @property
    def is_first_segment(self) -> bool:
        """Whether this is the transaction's first block (the server sends 1; only 1 counts as true)."""
        return self.first_segment == 1


class StreamStop(WireMessage, spec=stream.STREAM_STOP):
    pass


class StreamCommit(WireMessage, spec=stream.STREAM_COMMIT):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int
        flags: int = 0
        commit_lsn: LSN
        end_lsn: LSN
        commit_time: Timestamp


class StreamAbort(WireMessage, spec=stream.STREAM_ABORT):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        xid: int
        subxid: int
        abort_lsn: LSN | None = None
        abort_time: Timestamp | None = None

    @property
    def is_subtransaction(self) -> bool:
        """Whether only a subtransaction aborted (``subxid != xid``)."""
        return self.subxid != self.xid


class BeginPrepare(WireMessage, spec=twophase.BEGIN_PREPARE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        prepare_lsn: LSN
        end_lsn: LSN
        prepare_time: Timestamp
        xid: int
        gid: str


class Prepare(WireMessage, spec=twophase.PREPARE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        flags: int = 0
        prepare_lsn: LSN
        end_lsn: LSN
        prepare_time: Timestamp
        xid: int
        gid: str


class CommitPrepared(WireMessage, spec=twophase.COMMIT_PREPARED):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        flags: int = 0
        commit_lsn: LSN
        end_lsn: LSN
        commit_time: Timestamp
        xid: int
        gid: str


class RollbackPrepared(WireMessage, spec=twophase.ROLLBACK_PREPARED):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        flags: int = 0
        prepare_end_lsn: LSN
        rollback_end_lsn: LSN
        prepare_time: Timestamp
        rollback_time: Timestamp
        xid: int
        gid: str


class StreamPrepare(WireMessage, spec=twophase.STREAM_PREPARE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        flags: int = 0
        prepare_lsn: LSN
        end_lsn: LSN
        prepare_time: Timestamp
        xid: int
        gid: str


# ---------------------------------------------------------------------------------------------------------
# envelope


class XLogData(WireMessage, spec=envelope.XLOG_DATA):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        data_start: LSN
        wal_end: LSN
        send_time: Timestamp
        data: bytes


class PrimaryKeepalive(WireMessage, spec=envelope.PRIMARY_KEEPALIVE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        wal_end: LSN
        send_time: Timestamp
        reply_requested: int


class StandbyStatusUpdate(WireMessage, spec=envelope.STANDBY_STATUS_UPDATE):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        write_lsn: LSN
        flush_lsn: LSN
        apply_lsn: LSN
        send_time: Timestamp
        reply_requested: int


class HotStandbyFeedback(WireMessage, spec=envelope.HOT_STANDBY_FEEDBACK):
    if TYPE_CHECKING:  # the declaration's fields, written by python -m replwire.codec.wire.gen
        send_time: Timestamp
        xmin: int
        xmin_epoch: int
        catalog_xmin: int
        catalog_xmin_epoch: int
