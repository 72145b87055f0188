"""pgoutput's options, as data: which options a client may send with ``START_REPLICATION`` (or to the SQL
functions), of what kind, and which protocol and server versions take them.

Strategy: the same facts serve both sides of a connection -- the client that asks for a stream and the
server that checks what it was asked -- so they are written once, here, beside :mod:`.versions` (which
server speaks which protocol), and read by one options type, :class:`replwire.codec.options.PgoutputOptions`.
Each :class:`OptionSpec` says what pgoutput's ``parse_output_parameters`` and ``pgoutput_startup``
(``src/backend/replication/pgoutput/pgoutput.c``) check: the option's kind, the first server whose pgoutput
knows it (an older one answers "unrecognized pgoutput option"), the protocol version a value needs (streaming
on 2, parallel 4, two-phase 3), and a value's older spelling (``streaming`` took only a Boolean before
PostgreSQL 16).  The Boolean spellings are the ones pgoutput's values go through, ``defGetBoolean``
(``src/backend/commands/define.c``): ``true``/``on`` and ``false``/``off`` in any case -- not the wider set
of ``parse_bool`` (yes/no, 1/0, prefixes), which settings take but pgoutput's options do not.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BOOL", "ENUM", "FALSE", "INT", "OPTIONS", "TEXT_LIST", "TRUE", "OptionSpec"]

#: The kinds of option value.
BOOL, TEXT_LIST, ENUM, INT = "bool", "text list", "enum", "int"
#: The spellings of true and of false in a pgoutput option (compared without case), ``defGetBoolean``'s.
TRUE: frozenset[str] = frozenset({"true", "on"})
FALSE: frozenset[str] = frozenset({"false", "off"})


@dataclass(frozen=True)
class OptionSpec:
    """One pgoutput option.

    Attributes:
        name: the option's name as the client sends it.
        kind: :data:`BOOL`, :data:`TEXT_LIST`, :data:`ENUM` or :data:`INT`.
        since_server: the first ``server_version_num`` whose pgoutput takes the option.
        values: an enum's values (a Boolean is also taken for ``streaming``: off and on).
        needs_proto: per value, the protocol version it needs and what the refusal calls it.
        old_spellings: per value, the first server that takes it as written, and how it is sent to an older one.
    """

    name: str
    kind: str
    since_server: int = 100000
    values: tuple[str, ...] = ()
    needs_proto: tuple[tuple[str, int, str], ...] = ()
    old_spellings: tuple[tuple[str, int, str], ...] = ()


#: pgoutput's options, in the order a client sends them (the order a capture file's header records them in).
OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("proto_version", INT),
    OptionSpec("publication_names", TEXT_LIST),
    OptionSpec("streaming", ENUM, since_server=140000, values=("off", "on", "parallel"),
               needs_proto=(("on", 2, "streaming"), ("parallel", 4, "parallel streaming")),
               old_spellings=(("on", 160000, "true"),)),
    OptionSpec("binary", BOOL, since_server=140000),
    OptionSpec("messages", BOOL, since_server=140000),
    OptionSpec("two_phase", BOOL, since_server=150000, needs_proto=(("true", 3, "two-phase commit"),)),
    OptionSpec("origin", ENUM, since_server=160000, values=("any", "none")),
)
