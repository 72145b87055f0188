"""The walsender's phase diagram in the serve guide: drawn from the session's own tables, so it shows every
phase, every move and what each phase takes and waits for."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from replwire.codec.serve import diagram, walsender
from replwire.codec.serve.walsender import Phase

#: What each phase of a walsender takes, by the names of PostgreSQL's protocol docs (Message Flow: Start-up,
#: SASL Authentication, Simple Query, COPY Operations, Streaming Replication Protocol), written out here.
TAKES = {
    Phase.STARTUP: {"SSLRequest, GSSENCRequest", "CancelRequest", "StartupMessage"},
    Phase.AUTH: {"SASLInitialResponse, SASLResponse", "Terminate", "anything else: an error"},
    Phase.READY: {"Query", "Terminate"},
    Phase.STREAMING: {"Query", "CopyData", "CopyDone", "CopyFail", "Terminate"},
}


def texts(svg):
    return [element.text for element in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]


def test_the_phase_diagram_shows_every_phase_move_and_handler():
    svg = diagram.phase_diagram_svg()
    words = texts(svg)  # (well-formed XML, or this raises)
    for phase in Phase:
        assert phase.value in words
    for phase, names in TAKES.items():
        shown = {name for (at, key), _ in walsender.HANDLERS.items() if at is phase
                 for name in [diagram.EVENT_NAMES[key]]}
        assert shown == names
        for name in names:
            assert name in words
    for timer in {t.length for timers in walsender.TIMERS.values() for t in timers}:
        assert timer in words
    moves = sum(len(targets) for targets in walsender.TRANSITIONS.values())
    assert svg.count('marker-end="url(#phase-arrow)"') == moves  # one arrow per move
    # a client with no password goes from the startup to ready; one that ends its COPY goes back to ready
    assert Phase.READY in walsender.TRANSITIONS[Phase.STARTUP]
    assert Phase.READY in walsender.TRANSITIONS[Phase.STREAMING]
