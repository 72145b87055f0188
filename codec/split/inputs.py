"""The inputs of split decoding: files holding consecutive segments of one captured stream, and their records
(:mod:`replwire.codec.io.segments`, where ``replwire serve`` finds them too)."""

from __future__ import annotations

from ..io.segments import Input, open_inputs, read_records, stream_order, text_encoding

__all__ = ["Input", "open_inputs", "read_records", "stream_order", "text_encoding"]
