"""The throw-away PostgreSQL servers of the real-server tests: ``replwire.codec.localserver``, which
``replwire demo`` uses too."""

from replwire.codec.localserver import TEST_OS_USER, PgServer, PgServerError, find_bindir, server_settings

__all__ = ["TEST_OS_USER", "PgServer", "PgServerError", "find_bindir", "server_settings"]
