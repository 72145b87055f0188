"""``replwire serve``: a walsender of replwire's own, playing captures and built streams to logical
replication consumers, PostgreSQL's own subscriber included.

:mod:`.walsender` is the protocol, sans I/O, as a state table (with :mod:`.frontend`, :mod:`.repl_commands`,
:mod:`.scram`, and :mod:`.errors`, the one error root); :mod:`.replay` re-encodes a :mod:`.source` to what a
client asked for; :mod:`.server` runs sessions on sockets and owns what they share (slots, PIDs, cancel
keys), and :func:`serving` is the context manager for tests.
"""

from .errors import ServeError, WalsenderError
from .replay import Replay, Request, RequestError
from .server import Faults, Server, ServerAddress, Slots, serving, source_of
from .source import InputsRefused, Segment, Source, SourceError
from .walsender import ServeSettings, Session

__all__ = [
    "Faults", "InputsRefused", "Replay", "Request", "RequestError", "Segment", "ServeError", "ServeSettings", "Server",
    "ServerAddress", "Session", "Slots", "Source", "SourceError", "WalsenderError", "serving", "source_of",
]
