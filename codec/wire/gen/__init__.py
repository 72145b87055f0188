"""The code generators, written from the walker's model of the declarations: the fast codec's Python source
(``python -m replwire.codec.wire.gen`` writes ``replwire/codec/wire/_generated.py``, committed) and the
compiled codec's C source (:mod:`replwire.codec.wire.gen.c_module`, written at build time by ``setup.py``).
"""

__all__: list[str] = []
