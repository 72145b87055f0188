"""The errors replwire raises.

Strategy: one root class.  A :class:`DecodeError` is the peer's fault (bytes that are not a valid message)
and says where and what: message, field path with array indexes, byte offset, tag, protocol version.  An
:class:`EncodeError` is the caller's fault (a message object that cannot be put on the wire).  Both are
``ValueError`` subclasses, so code that already guards against ``ValueError`` keeps working.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["DecodeError", "EncodeError", "ReplwireError", "install_hint"]


class ReplwireError(Exception):
    """Root of every error replwire raises on purpose."""


class DecodeError(ReplwireError, ValueError):
    """Bytes that are not a valid message.

    Attributes:
        reason (str): what is wrong, in plain words.
        offset (int): byte offset (from the start of the message) of the field that failed.
        tag (str | None): the message's tag character, or ``None`` for an empty input.
        message (str | None): the message class name, when the tag was known.
        field (str | None): the field path with array indexes (``columns[1].type_id``), or ``None`` when
            the failure is not inside one field (trailing bytes, unknown tag).
        proto_version (int | None): the protocol version the bytes were parsed under (``None`` for the
            envelope).
    """

    def __init__(self, reason: str, *, offset: int, tag: str | None = None, message: str | None = None,
                 field: str | None = None, proto_version: int | None = None) -> None:
        self.reason = reason
        self.offset = offset
        self.tag = tag
        self.message = message
        self.field = field
        self.proto_version = proto_version
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ".".join(part for part in (self.message, self.field) if part).replace(".[", "[")
        context = []
        if self.tag is not None:
            context.append(f"tag {self.tag!r}")
        if self.proto_version is not None:
            context.append(f"proto {self.proto_version}")
        suffix = f" ({', '.join(context)})" if context else ""
        return f"{where + ' ' if where else ''}at offset {self.offset}{suffix}: {self.reason}"

    def __reduce__(self) -> tuple[Callable[..., DecodeError], tuple[object, ...]]:
        return (_rebuild_decode_error, (self.reason, self.offset, self.tag, self.message, self.field,
                                        self.proto_version))


def _rebuild_decode_error(reason: str, offset: int, tag: str | None, message: str | None, field: str | None,
                          proto_version: int | None) -> DecodeError:
    return DecodeError(reason, offset=offset, tag=tag, message=message, field=field,
                       proto_version=proto_version)


class EncodeError(ReplwireError, ValueError):
    """A message object that cannot be built: a wrong type, a value out of range, a NUL inside a string,
    a value for a field that is absent in this protocol version or stream state, or a missing one.

    Attributes:
        reason (str): what is wrong.
        message (str | None): the message class name.
        field (str | None): the field path with array indexes, or ``None``.
    """

    def __init__(self, reason: str, *, message: str | None = None, field: str | None = None) -> None:
        self.reason = reason
        self.message = message
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ".".join(part for part in (self.message, self.field) if part).replace(".[", "[")
        return f"{where}: {self.reason}" if where else self.reason

    def __reduce__(self) -> tuple[Callable[..., EncodeError], tuple[object, ...]]:
        return (_rebuild_encode_error, (self.reason, self.message, self.field))


def _rebuild_encode_error(reason: str, message: str | None, field: str | None) -> EncodeError:
    return EncodeError(reason, message=message, field=field)


def install_hint(*extras: str) -> str:
    """The command that installs what replwire's optional ``extras`` need (``"live"``, ``"values"``, ...),
    for the message of an error about a missing dependency: ``pip install`` of the requirements those
    extras declare in the installed package's metadata.  replwire itself is not on the package index, so
    ``pip install 'replwire[live]'`` would not find it; the requirements themselves are."""
    from importlib import metadata

    try:
        declared = metadata.requires("replwire") or []
    except metadata.PackageNotFoundError:  # run from a checkout or a zip that is not installed
        declared = []
    wanted: list[str] = []
    for requirement in declared:
        name, _, marker = requirement.partition(";")
        if any(f'extra == "{extra}"' in marker or f"extra == '{extra}'" in marker for extra in extras):
            if name.strip() not in wanted:
                wanted.append(name.strip())
    which = " and ".join(f"'{extra}'" for extra in extras)
    if not wanted:
        return f"install replwire with its {which} extra{'s' if len(extras) > 1 else ''}"
    return f"pip install {' '.join(repr(r) for r in wanted)} (replwire's {which} extra{'s' if len(extras) > 1 else ''})"
