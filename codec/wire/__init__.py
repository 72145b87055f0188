"""Stateless parse and build of single messages and envelope frames.

``reference`` runs the construct declarations themselves; ``interpreter`` walks the same declarations for
exact errors and awkward inputs; ``fast`` is the codec generated from them (by ``gen``, into the committed
module ``_generated``, with ``runtime`` for what that code calls), the one :mod:`replwire.codec` exports;
``explain`` annotates a message byte by byte.
"""

__all__: list[str] = []
