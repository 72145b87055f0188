"""DebeziumEvents.compiled_events, which the row path asks for before each try between transactions: made
once, and again whenever what it is made of changes."""

from __future__ import annotations

from replwire.codec.stream.debezium import DebeziumEvents


def test_compiled_events_are_made_once_and_follow_their_settings():
    events = DebeziumEvents("1.0", db="app")
    first = events.compiled_events()
    assert events.compiled_events() is first  # (not made again between tries)
    assert first[3] == -1 and b'"db":"app"' in first[1] and b'"version":"replwire-1.0"' in first[0]
    events.written_through(1234)
    assert events.compiled_events()[3] == 1234
    events.db = "other"
    assert b'"db":"other"' in events.compiled_events()[1]
    events.name, events.version = "n\u00e9", "replwire-2"
    start = events.compiled_events()[0]
    assert '"name":"n\u00e9"'.encode() in start and b'"version":"replwire-2"' in start
    events.tombstones = False
    assert events.compiled_events()[2] is False and events.compiled_events()[3] == 1234
