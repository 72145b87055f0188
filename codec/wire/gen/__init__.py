"""The code generators: the fast codec's Python source, written from the walker's model of the declarations.

``python -m replwire.codec.wire.gen`` writes the generated module ``replwire/codec/wire/_generated.py``.
"""
