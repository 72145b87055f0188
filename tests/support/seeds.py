"""Seed messages for the robustness properties: the golden vectors and the stored real-server corpus."""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

from tests.support.vectors import VALID

CORPUS_DIR = pathlib.Path(__file__).parent.parent / "captures"


@dataclass(frozen=True)
class Seed:
    name: str
    layer: str
    data: bytes
    proto_version: int | None = None
    in_stream: bool = False
    sender: str | None = None


def corpus_seeds() -> list[Seed]:
    """Every message of the stored real-server corpus (see ``tests/support/make_corpus.py``)."""
    seeds = []
    for path in sorted(CORPUS_DIR.glob("*.json")):
        capture = json.loads(path.read_text())
        for index, row in enumerate(capture["messages"]):
            seeds.append(Seed(f"{path.stem}#{index}", capture.get("layer", "logical"), bytes.fromhex(row["hex"]),
                              capture.get("proto_version"), row.get("in_stream", False), row.get("sender")))
    return seeds


def vector_seeds() -> list[Seed]:
    return [Seed(v.name, v.layer, v.wire, v.ctx.get("proto_version"), v.ctx.get("in_stream", False), v.sender)
            for v in VALID]


ALL = vector_seeds() + corpus_seeds()
