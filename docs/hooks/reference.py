"""mkdocs hook: generate the protocol reference from replwire's declarations while the site builds.

It adds one page per message (and the overview pages) as generated files, puts them in the navigation,
and draws the framing diagram into ``reference/framing.md``.  The worked examples are the real messages
stored in ``tests/captures/`` (captured from PostgreSQL 15 and 18 by ``tests/support/make_corpus.py``); the
hand-assembled golden vectors of ``tests/vectors/messages.json`` serve only messages no server sends.  Any
:class:`~replwire.codec.docs.pages.DocsError` fails the build.
"""

from __future__ import annotations

import json
import pathlib
import sys

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

from replwire.codec.docs import pages as docgen
from replwire.codec.serve import diagram
from replwire.codec.stream import decoder

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # tests/ (the golden vectors' loader) is a plain package of the checkout
    sys.path.insert(0, str(ROOT))

from tests.support import vectors  # noqa: E402

CAPTURES = ROOT / "tests" / "captures"
VECTORS = ROOT / "tests" / "vectors" / "messages.json"
PLACEHOLDER = "<!-- replwire:framing-diagram -->"


def _server(version_num: int) -> str:
    return f"{version_num // 10000}.{version_num % 10000}"


def captured_examples() -> list[docgen.Example]:
    examples = []
    for path in sorted(CAPTURES.glob("pg*.json"), reverse=True):  # PostgreSQL 18 first
        capture = json.loads(path.read_text(encoding="utf-8"))
        server = _server(capture["server"])
        for row in capture["messages"]:
            source = f"captured from PostgreSQL {server} ({row['config']})"
            if capture["layer"] == "envelope":
                examples.append(docgen.Example(bytes.fromhex(row["hex"]), source, sender=row["sender"]))
            else:
                examples.append(docgen.Example(bytes.fromhex(row["hex"]), source, capture["proto_version"],
                                               row["in_stream"]))
    return examples


def vector_examples() -> list[docgen.Example]:
    return [docgen.Example(v.wire, f"hand-assembled golden vector `{v.name}` (no server sends this message)",
                           v.ctx.get("proto_version"), v.ctx.get("in_stream", False), v.sender)
            for v in vectors.VALID]


def on_config(config, **kwargs):
    nav = config["nav"]
    for index, entry in enumerate(nav):
        if isinstance(entry, dict) and entry.get("Protocol reference") == "reference/index.md":
            nav[index] = {"Protocol reference": docgen.nav()}
    return config


def on_files(files, config, **kwargs):
    try:
        generated = docgen.pages(captured_examples(), vector_examples())
    except docgen.DocsError as error:
        raise PluginError(f"replwire reference: {error}") from error
    for path, content in generated.items():
        files.append(File.generated(config, path, content=content))
    return files


def on_page_markdown(markdown, page, config, files, **kwargs):
    if PLACEHOLDER in markdown:
        markdown = markdown.replace(PLACEHOLDER, docgen.framing_svg())
    if "<!-- replwire:decoder-states -->" in markdown:  # drawn from the Decoder's transition table
        markdown = markdown.replace("<!-- replwire:decoder-states -->", decoder.state_diagram_svg())
    if "<!-- replwire:walsender-phases -->" in markdown:  # drawn from the walsender's tables
        markdown = markdown.replace("<!-- replwire:walsender-phases -->", diagram.phase_diagram_svg())
    return markdown
