"""pgoutput's options, read and written: what a client asks for, spelled for a server, and checked as
pgoutput checks them.

Strategy: one frozen type, :class:`PgoutputOptions`, serves both sides of a replication connection over the
table :data:`replwire.schema.options.OPTIONS`.  The server side, :meth:`PgoutputOptions.from_request`,
refuses what pgoutput refuses, with its messages: an option the server's pgoutput does not know, a missing or
out-of-range ``proto_version``, a value that is not a Boolean, streaming or two-phase on a protocol that has
neither.  The client side, :meth:`PgoutputOptions.for_server`, spells the options for one server (streaming
``on`` as ``true`` before PostgreSQL 16) and checks them with :meth:`~PgoutputOptions.from_request` itself,
so a client never asks what the server would refuse, and both sides refuse with the same words.  A
refusal is an :class:`OptionsError` carrying the SQLSTATE pgoutput reports it with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from ..schema.options import FALSE, OPTIONS, TRUE, OptionSpec
from ..schema.versions import highest_proto_version
from .errors import ReplwireError

__all__ = ["OptionsError", "PgoutputOptions", "as_arguments", "boolean", "quote_identifier", "streaming_mode"]

_SPECS: dict[str, OptionSpec] = {spec.name: spec for spec in OPTIONS}
_Options = TypeVar("_Options", bound="PgoutputOptions")


class OptionsError(ReplwireError, ValueError):
    """pgoutput options a server refuses; ``sqlstate`` is the code it refuses them with (22023,
    invalid_parameter_value, unless given)."""

    def __init__(self, message: str, sqlstate: str = "22023") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def quote_identifier(name: str) -> str:
    """``name`` as an SQL identifier (also the form pgoutput's ``publication_names`` takes)."""
    return '"' + name.replace('"', '""') + '"'


def boolean(name: str, value: str) -> bool:
    """The Boolean value of option ``name`` spelled ``value``, as pgoutput reads it."""
    text = value.strip().lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise OptionsError(f"{name} requires a Boolean value")


def streaming_mode(value: str) -> str:
    """``streaming``'s value: ``"off"``, ``"on"`` or ``"parallel"``, from a Boolean or ``parallel``."""
    text = value.strip().lower()
    if text == "parallel":
        return text
    return "on" if boolean("streaming", text) else "off"


def as_arguments(options: Mapping[str, str]) -> list[str]:
    """``options`` (names and values) as the variadic text array of ``pg_logical_slot_peek_binary_changes``."""
    return [item for pair in options.items() for item in pair]


def _check_protocol(proto: int, server_version: int) -> int:
    highest = highest_proto_version(server_version)
    if proto > highest:
        raise OptionsError(f"client sent proto_version={proto} but server only supports protocol {highest} or "
                           f"lower", "0A000")
    if proto < 1:
        raise OptionsError(f"client sent proto_version={proto} but server only supports protocol 1 or higher",
                           "0A000")
    return proto


@dataclass(frozen=True)
class PgoutputOptions:
    """The pgoutput options of one stream: ``proto_version`` (``None``, on the client side: the highest the
    server speaks), the publications, ``streaming`` (``"off"``, ``"on"`` or ``"parallel"``), ``two_phase``,
    ``messages``, ``binary`` and ``origin`` (``"any"`` or ``"none"``)."""

    proto_version: int | None = None
    publications: tuple[str, ...] = ()
    streaming: str = "off"
    two_phase: bool = False
    messages: bool = False
    binary: bool = False
    origin: str = "any"

    @classmethod
    def from_request(cls: type[_Options], options: Mapping[str, str], *, server_version: int) -> _Options:
        """The options a client sent (names and values as text), checked as the pgoutput of a server of
        ``server_version`` checks them."""
        for name in options:
            spec = _SPECS.get(name)
            if spec is None or server_version < spec.since_server:
                raise OptionsError(f"unrecognized pgoutput option: {name}")
        if "proto_version" not in options:
            raise OptionsError("proto_version option missing")
        try:
            proto = int(options["proto_version"])
        except ValueError:
            raise OptionsError(f"invalid proto_version: {options['proto_version']!r}") from None
        _check_protocol(proto, server_version)
        if "publication_names" not in options:
            raise OptionsError("publication_names parameter missing")
        publications = tuple(p.strip().strip('"') for p in options["publication_names"].split(",") if p.strip())
        streaming = streaming_mode(options.get("streaming", "off"))
        two_phase = boolean("two_phase", options.get("two_phase", "false"))
        for name, value in (("streaming", streaming), ("two_phase", "true" if two_phase else "false")):
            for asked, need, what in _SPECS[name].needs_proto:
                if value == asked and proto < need:
                    raise OptionsError(f"requested proto_version={proto} does not support {what}, need {need} or "
                                       "higher")
        origin = options.get("origin", "any").strip().lower()
        if origin not in _SPECS["origin"].values:
            raise OptionsError(f"unrecognized origin value: \"{origin}\"")
        return cls(proto, publications, streaming, two_phase, boolean("messages", options.get("messages", "false")),
                   boolean("binary", options.get("binary", "false")), origin)

    def protocol(self, server_version: int) -> int:
        """The protocol version these options use on a server of ``server_version``: the one asked for,
        checked, or the highest it speaks."""
        if self.proto_version is None:
            return highest_proto_version(server_version)
        return _check_protocol(self.proto_version, server_version)

    def for_server(self, server_version: int) -> dict[str, str]:
        """The options to send a server of ``server_version`` (``proto_version`` first), spelled for it and
        checked as its pgoutput will check them."""
        out = {"proto_version": str(self.protocol(server_version)),
               "publication_names": ",".join(quote_identifier(name) for name in self.publications)}
        values: dict[str, str | bool] = {"streaming": self.streaming, "binary": self.binary,
                                         "messages": self.messages, "two_phase": self.two_phase,
                                         "origin": self.origin}
        for spec in OPTIONS:
            if spec.name not in values:
                continue
            value = values[spec.name]
            if value in (False, "off") or (spec.name == "origin" and value == "any"):
                continue  # the default: not sent
            text = "true" if value is True else str(value)
            for asked, since, spelled in spec.old_spellings:
                if text == asked and server_version < since:
                    text = spelled
            out[spec.name] = text
        PgoutputOptions.from_request(out, server_version=server_version)
        return out
