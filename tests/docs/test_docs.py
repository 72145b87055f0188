"""The documentation site: built strictly, generated from the declarations, examples that run."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from replwire import schema
from replwire.codec import walker
from replwire.codec.docs import pages as docgen
from tests.support.docexamples import check_examples

ROOT = pathlib.Path(__file__).resolve().parents[2]


def build_site(out: pathlib.Path) -> None:
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                   check=True, capture_output=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("site")
    build_site(out)
    return out


def page_text(site: pathlib.Path, spec) -> str:
    html = (site / docgen.page_path(spec).removesuffix(".md") / "index.html").read_text(encoding="utf-8")
    return re.sub(r"<[^>]+>", " ", html)


@pytest.mark.parametrize("spec", docgen.all_specs(), ids=lambda s: s.name)
def test_every_message_has_a_page_with_every_field(site, spec):
    text = page_text(site, spec)
    assert spec.name in text
    for field in walker.layout(spec).fields:
        assert field.name in text, f"{spec.name}.{field.name} missing from its page"
    for nested in docgen.nested_records(walker.layout(spec).record):
        if nested.name != "TupleColumn":
            for field in nested.fields:
                assert field.name in text
    assert "Worked example" in text
    assert "Decoded, and re-built" in text


def test_version_matrix_lists_every_message(site):
    html = (site / "reference" / "versions" / "index.html").read_text(encoding="utf-8")
    for spec in docgen.all_specs():
        assert f">{spec.name}</a>" in html


def test_worked_examples_are_real_captures_where_servers_send_the_message():
    spec = importlib.util.spec_from_file_location("reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    captured = hook.captured_examples()
    for spec in docgen.all_specs():
        picked = docgen.pick_examples(spec, captured)
        if spec.name in ("StandbyStatusUpdate", "HotStandbyFeedback"):
            assert not picked  # sent by clients only: the page uses a hand-assembled vector
        else:
            assert picked and all("captured from PostgreSQL" in e.source for e in picked), spec.name


@pytest.mark.parametrize("page", sorted((ROOT / "docs").rglob("*.md")), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_print_what_they_say(page):
    check_examples(page)


def test_results_measured_on_uncommitted_changes_fail_the_build(tmp_path):
    spec = importlib.util.spec_from_file_location("benchmark_hook", ROOT / "docs" / "hooks" / "benchmark.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    results = json.loads((ROOT / "bench" / "results" / "snapshot.json").read_text())
    assert "+" not in results["machine"]["replwire_commit"]
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(results))
    assert "Initial snapshot" in hook.section(path, "Initial snapshot", "intro")
    results["machine"]["replwire_commit"] += "+uncommitted"
    path.write_text(json.dumps(results))
    with pytest.raises(hook.report.ResultsError, match="uncommitted"):
        hook.section(path, "Initial snapshot", "intro")


def test_a_field_without_description_fails_the_build():
    spec = schema.LOGICAL["B"]
    record = walker.layout(spec).record
    broken = dataclasses.replace(record.fields[1], meta=dataclasses.replace(record.fields[1].meta, doc=" "))
    with pytest.raises(docgen.DocsError, match="no description"):
        docgen.field_table(dataclasses.replace(record, fields=(record.fields[0], broken)))


def test_an_example_that_does_not_round_trip_fails_the_build(monkeypatch):
    spec = schema.LOGICAL["B"]
    data = bytes.fromhex("42000000000169e5a80002894463074dc800000313")
    example = docgen.Example(data, "test", proto_version=1)
    docgen.check_example(spec, example)
    monkeypatch.setattr(docgen, "build", lambda message, **ctx: data[:-1] + b"\x00")
    with pytest.raises(docgen.DocsError, match="does not round-trip"):
        docgen.check_example(spec, example)


def test_a_message_without_example_fails_the_build():
    with pytest.raises(docgen.DocsError, match="has no worked example"):
        docgen.message_page(schema.LOGICAL["B"], [])


def test_docgen_has_words_for_every_node_the_schema_uses():
    for spec in docgen.all_specs():
        for node in walker.iter_nodes(walker.layout(spec).record):
            docgen.wire_type(node)
    for declaration in schema.CAPTURE_FILE.values():
        for node in walker.iter_nodes(walker.node(declaration)):
            docgen.wire_type(node)


def test_capture_format_page_has_every_field(site):
    html = (site / "reference" / "capture-format" / "index.html").read_text(encoding="utf-8")
    for name in ("magic", "format_version", "server_version", "proto_version", "options", "lsn", "xid", "data"):
        assert f"<code>{name}</code>" in html
    with pytest.raises(docgen.DocsError):
        docgen.wire_type(object())  # type: ignore[arg-type]


def test_framing_diagram_shows_every_label_whole():
    import xml.etree.ElementTree as ET

    texts = [t.text or "" for t in ET.fromstring(docgen.framing_svg()).iter("{http://www.w3.org/2000/svg}text")]
    shown = " ".join(texts)
    for caption, boxes in docgen.FRAMING:
        assert caption in texts
        for label, _, _ in boxes:
            assert label in shown, f"{label!r} is not shown whole"
    relation = next(t for t in texts if t.startswith("Relation R"))
    assert len(relation) < len(docgen.FRAMING[0][1][2][0])  # the long label does wrap


def attribute_tables(html: str) -> dict[str, list[tuple[str, str]]]:
    """The API page's Attributes tables: the heading id of each, and its (name, type) rows as text."""
    tables = {}
    for match in re.finditer(r"<table>(.*?)</table>", html, flags=re.S):
        rows = re.findall(r"<tr[^>]*>(.*?)</tr>", match.group(1), flags=re.S)
        if not rows or [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<th>(.*?)</th>", rows[0])][:2] \
                != ["Name", "Type"]:
            continue
        heading = re.findall(r'<h\d id="([^"]+)"', html[:match.start()])[-1]
        cells = [[re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", cell)).strip()
                  for cell in re.findall(r"<td>(.*?)</td>", row, re.S)] for row in rows[1:]]
        tables[heading] = [(row[0], row[1]) for row in cells]
    return tables


def test_api_page_renders_docstrings_as_markdown(site):
    html = (site / "api" / "index.html").read_text(encoding="utf-8")
    article = html[html.index("<article"):html.index("</article>")]
    assert "<blockquote>" not in article, "doctest lines rendered as quotes"
    assert not re.search(r":(class|func|mod|meth|data):", article), "Sphinx roles shown as text"
    assert article.count('<span class="gp">&gt;&gt;&gt; </span>') >= 8  # the doctests, highlighted as code
    tables = attribute_tables(article)
    assert {name for name, _ in tables["replwire.codec.DecodeError"]} >= {"reason", "offset", "field"}
    for heading, rows in tables.items():
        assert all(kind for _, kind in rows), f"{heading}: an attribute without type: {rows}"
    # the PostgreSQL docs: Begin is Int64 (XLogRecPtr) final LSN, Int64 (TimestampTz) commit time, Int32 xid
    assert tables["replwire.codec.messages.Begin"] == [("final_lsn", "LSN"), ("commit_time", "Timestamp"),
                                                        ("xid", "int")]
    assert ("old", "list[TupleColumn] | None") in tables["replwire.codec.messages.Update"]
    assert "int([x]) -&gt; integer" not in article  # Timestamp.INFINITY has its own description


# ---------------------------------------------------------------------------------------------------------
# as a reader sees it: the built site served on localhost, in headless Chromium

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def served(site):
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert os.path.exists(CHROMIUM), "Debian's chromium is not installed (scripts/setup.sh installs it)"
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.mark.parametrize("path, name", [("", "home"), ("reference/versions/", "version-matrix"),
                                         ("reference/dml/update/", "update")])
def test_pages_render_in_a_browser(served, browser, site, path, name):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    response = page.goto(served + path)
    assert response is not None and response.ok
    assert page.locator("h1").first.is_visible()
    if name == "home":
        assert "From bytes to meaning" in page.locator("article").inner_text()
        assert page.locator("nav").get_by_text("Version matrix").count() >= 1
    elif name == "version-matrix":
        rows = page.locator("article table").first.locator("tbody tr")
        assert rows.count() == len(docgen.all_specs())
    else:
        header = page.locator("article table").nth(1).locator("thead").inner_text()
        assert "Field" in header and "Wire type" in header and "Present" in header
        diagram = page.locator("svg.replwire-layout").first
        assert diagram.is_visible()
        box = diagram.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 40
        assert page.locator("svg.replwire-layout text").filter(has_text="relation_id").count() == 1
        # the summary table has a header that says something, not an empty row
        assert page.locator("article table").first.locator("thead").inner_text().strip()
        # a field's name is never broken inside (`relation_i` over `d`): one line box each
        broken = page.evaluate("""() => Array.from(document.querySelectorAll('article table td:first-child code'))
            .filter(c => c.getClientRects().length > 1).map(c => c.innerText)""")
        assert not broken, broken
    shots = site / "screenshots"
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    review = ROOT / "build" / "screenshots"  # kept for review after the run (build/ is not committed)
    review.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(review / f"{name}.png"), full_page=True)
    assert not errors, errors
    page.close()


#: The pages a reader opens first, as paths under the site's root.
MAIN_PAGES = {
    "home": "", "quickstart": "guide/quickstart/", "server": "guide/server/", "parse": "guide/parse/",
    "api": "api/", "update": "reference/dml/update/",
    "relation": "reference/schema/relation/", "version-matrix": "reference/versions/", "benchmark": "benchmark/",
    "install": "guide/install/", "explain": "guide/explain/", "errors": "guide/errors/",
    "decoder": "guide/decoder/", "cli": "guide/cli/", "spark": "guide/spark/", "framing": "reference/framing/",
    "capture": "guide/capture/", "snapshot": "guide/snapshot/", "decode": "guide/decode/",
    "debezium": "guide/debezium/", "spark-jobs": "guide/spark-jobs/", "spark-source": "guide/spark-source/",
    "spark-streaming": "guide/spark-streaming/",
}

#: From the browser's layout: what sticks out past the page, which boxes of the article scroll sideways,
#: and each diagram text with its size on screen (font size times the SVG's scale).
#: An element may reach past the page only inside a box that scrolls on its own (``overflow-x`` auto or
#: scroll) and itself ends inside the page: that box shows a scroll bar instead of cutting the element off.
OVERFLOW_JS = """() => {
  const width = document.documentElement.clientWidth;
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  const scroller = el => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const overflow = getComputedStyle(p).overflowX;
      if ((overflow === 'auto' || overflow === 'scroll') && p.getBoundingClientRect().right <= width + 1) return p;
    }
    return null;
  };
  const past = [];
  for (const el of document.querySelectorAll('body *')) {
    const box = el.getBoundingClientRect();
    if (box.right <= width + 1 || !el.checkVisibility({opacityProperty: true, visibilityProperty: true})
        || scroller(el)) continue;
    past.push(`${name(el)} ends at ${Math.round(box.right)}`);
  }
  const scrolling = [];
  for (const el of document.querySelectorAll('article *')) {
    const overflow = getComputedStyle(el).overflowX;
    if ((overflow === 'auto' || overflow === 'scroll') && el.scrollWidth > el.clientWidth + 1) {
      scrolling.push(`${name(el)} (${el.scrollWidth} px in ${el.clientWidth}): ${el.innerText.slice(0, 60)}`);
    }
  }
  const texts = [];
  for (const t of document.querySelectorAll('article svg text')) {
    const scale = t.ownerSVGElement.getScreenCTM().a;
    const own = Array.from(t.childNodes).filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.data).join('');
    texts.push([own, parseFloat(getComputedStyle(t).fontSize) * scale]);
  }
  return {width, pageWidth: document.documentElement.scrollWidth, past, scrolling, texts};
}"""


@pytest.mark.parametrize("width", [1400, 800])
@pytest.mark.parametrize("name", MAIN_PAGES)
def test_main_pages_fit_the_window(served, browser, name, width):
    """Nothing is wider than the page; at 1400 px no table or code block needs scrolling either, and the
    diagrams' text is at least 11 px, with no label cut short."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        response = page.goto(served + MAIN_PAGES[name])
        assert response is not None and response.ok
        found = page.evaluate(OVERFLOW_JS)
    finally:
        page.close()
    assert found["pageWidth"] <= found["width"], f"{name} scrolls sideways at {width} px"
    assert not found["past"], f"{name} at {width} px: past the page: {found['past'][:10]}"
    if width == 1400:
        assert not found["scrolling"], f"{name}: needs scrolling at 1400 px: {found['scrolling'][:10]}"
        small = [(text, round(size, 1)) for text, size in found["texts"] if size < 11]
        assert not small, f"{name}: diagram text under 11 px: {small[:10]}"
    cut = [text for text, _ in found["texts"] if text.endswith("…")]
    assert not cut, f"{name}: diagram labels cut short: {cut}"
