"""The walsender's phases drawn for the docs, from the tables the session runs on.

Strategy: :func:`phase_diagram_svg` reads :data:`~replwire.codec.serve.walsender.TRANSITIONS` (the moves),
:data:`~replwire.codec.serve.walsender.HANDLERS` (what each phase answers) and
:data:`~replwire.codec.serve.walsender.TIMERS` (what each phase waits for) and draws them as an SVG: the
phases a client goes through, left to right, with what each takes and waits for inside its box, one arrow
per move, and the closed phase below them all.  Drawn from the tables, the picture cannot disagree with the
session; a message type without a name here fails the drawing (and its test) instead of showing a byte.
"""

from __future__ import annotations

import html

from . import frontend
from .walsender import HANDLERS, OTHER, TIMERS, TRANSITIONS, Phase

__all__ = ["phase_diagram_svg"]

#: What the docs call each event a phase handles: packets before the startup by class, messages by type byte
#: (the names of PostgreSQL's frontend/backend protocol docs).
EVENT_NAMES: dict[bytes | type | None, str] = {
    frontend.EncryptionRequest: "SSLRequest, GSSENCRequest",
    frontend.CancelRequest: "CancelRequest",
    frontend.Startup: "StartupMessage",
    b"p": "SASLInitialResponse, SASLResponse",
    b"Q": "Query",
    b"d": "CopyData",
    b"c": "CopyDone",
    b"f": "CopyFail",
    b"X": "Terminate",
    OTHER: "anything else: an error",
}

_ROW = [Phase.STARTUP, Phase.AUTH, Phase.READY, Phase.STREAMING]


def phase_diagram_svg() -> str:
    """An SVG of the session's phases (see the module docstring)."""
    box_w, box_h, gap, top, left = 200, 165, 60, 60, 20
    closed_y = top + box_h + 110
    width = left * 2 + len(_ROW) * box_w + (len(_ROW) - 1) * gap
    height = closed_y + 70
    x_of = {phase: left + i * (box_w + gap) for i, phase in enumerate(_ROW)}
    out = [f'<svg class="replwire-states" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="Walsender phase diagram">',
           '<defs><marker id="phase-arrow" markerWidth="10" markerHeight="10" refX="9" refY="5" orient="auto" '
           'markerUnits="userSpaceOnUse"><path d="M0,0 L10,5 L0,10 z" fill="#37474f"/></marker></defs>']

    def text(x: float, y: float, words: str, size: int = 11, bold: bool = False) -> None:
        weight = ' font-weight="bold"' if bold else ""
        out.append(f'<text x="{x:.0f}" y="{y:.0f}" font-size="{size}"{weight} text-anchor="middle" '
                   f'fill="#102027">{html.escape(words)}</text>')

    def arrow(x1: float, y1: float, x2: float, y2: float) -> None:
        out.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="#37474f" '
                   f'stroke-width="1.5" marker-end="url(#phase-arrow)"/>')

    for phase in _ROW:
        x = x_of[phase]
        out.append(f'<rect x="{x}" y="{top}" width="{box_w}" height="{box_h}" rx="10" fill="#e3f2fd" '
                   f'stroke="#37474f" stroke-width="1.5"/>')
        text(x + box_w / 2, top + 22, phase.value, 15, bold=True)
        lines = ["takes:", *(EVENT_NAMES[key] for (at, key) in HANDLERS if at is phase)]
        waits = [timer.length for timer in TIMERS[phase]]
        if waits:
            lines += ["waits:", *waits]
        for k, line in enumerate(lines):
            text(x + box_w / 2, top + 42 + 13 * k, line, 10 if line.endswith(":") else 11)
    closed_x = left + (width - 2 * left - box_w) / 2
    out.append(f'<rect x="{closed_x:.0f}" y="{closed_y}" width="{box_w}" height="44" rx="10" fill="#eceff1" '
               f'stroke="#37474f" stroke-width="1.5"/>')
    text(closed_x + box_w / 2, closed_y + 27, Phase.CLOSED.value, 15, bold=True)
    for source, targets in TRANSITIONS.items():
        for target in sorted(targets, key=lambda p: p.value):
            if target is Phase.CLOSED:  # down to the closed phase
                middle = x_of[source] + box_w / 2
                arrow(middle, top + box_h, closed_x + box_w / 2 + (middle - width / 2) / 4, closed_y)
            elif _ROW.index(target) == _ROW.index(source) + 1:  # to the next phase on the right
                arrow(x_of[source] + box_w, top + box_h / 2, x_of[target], top + box_h / 2)
            else:  # a move past the next phase, or back: an arc above the boxes
                forward = _ROW.index(target) > _ROW.index(source)
                x1, x2 = x_of[source] + box_w / 2, x_of[target] + box_w / 2 + (-40 if forward else 40)
                lift = 22 if forward else 44
                out.append(f'<path d="M{x1:.0f},{top} C{x1:.0f},{top - lift} {x2:.0f},{top - lift} {x2:.0f},{top}" '
                           f'fill="none" stroke="#37474f" stroke-width="1.5" marker-end="url(#phase-arrow)"/>')
    out.append("</svg>")
    return "".join(out)
