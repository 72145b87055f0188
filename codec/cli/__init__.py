"""The ``replwire`` command: parse, decode, capture, serve, fuzz, demo, and the Spark jobs (``replwire spark``)."""

from .main import main

__all__ = ["main"]
