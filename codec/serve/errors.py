"""The errors of replwire's walsender: one root, carrying what the client is told.

Strategy: h11's one ``ProtocolError``.  Every error a client causes is a :class:`WalsenderError`, raised
where it is found -- the frontend reader, the replication-command reader, the SCRAM exchange, the session's
handlers -- and turned into an ErrorResponse in one place, the session's ``receive``.  ``sqlstate`` is the
code that ErrorResponse carries; ``fatal`` says what follows it, as PostgreSQL's ``ereport`` level does:
FATAL ends the session, ERROR is followed by ReadyForQuery and the session goes on; ``detail`` is its
DETAIL field.  The subclasses say which piece found the error and carry its usual code, so a raise names
only what differs.  :class:`ServeError` is the caller's: a server that cannot start as asked, told to
whoever started it, never to a client.
"""

from __future__ import annotations

from ..errors import ReplwireError

__all__ = ["AuthenticationFailed", "ProtocolViolation", "ServeError", "UnknownCommand", "WalsenderError"]


class WalsenderError(ReplwireError):
    """An error a client caused, answered with an ErrorResponse.

    Attributes:
        sqlstate (str): the SQLSTATE the client is told (``08P01``, protocol violation, unless given).
        fatal (bool): the session ends (severity FATAL); otherwise severity ERROR and the session goes on.
        detail (str | None): the ErrorResponse's DETAIL field, if any.
    """

    sqlstate: str = "08P01"
    fatal: bool = True

    def __init__(self, message: str, sqlstate: str | None = None, *, fatal: bool | None = None,
                 detail: str | None = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate
        if fatal is not None:
            self.fatal = fatal
        self.detail = detail


class ProtocolViolation(WalsenderError):
    """The client broke the protocol (08P01 unless given): the session ends."""


class UnknownCommand(WalsenderError):
    """A query that is not a command this server runs; the ``sqlstate`` is how PostgreSQL would classify it
    (42601, a syntax error, unless given).  The session goes on."""

    sqlstate = "42601"
    fatal = False


class AuthenticationFailed(WalsenderError):
    """The client's SCRAM messages are malformed or its proof is wrong (28P01): the session ends.  The
    message says why; the client is told only that the password failed, with it as the detail."""

    sqlstate = "28P01"


class ServeError(ReplwireError, RuntimeError):
    """The server cannot start as asked (address, password, stream)."""
