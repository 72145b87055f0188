"""The package only imports down its layers: bytes -> wire -> stream -> io -> split -> decode -> decode_output -> cli
/ spark.

Every import statement of every module (at module level or inside a function) is resolved to the module it
names; a module may import its own part and the parts below it, never one above or beside it.  The
public ``replwire.codec`` package itself (``__init__``, the facade that imports everything) is for users:
only the top layer (the CLI and the Spark adapters, users of the API themselves) may import it.  Inside
``replwire.schema`` the building blocks the declarations are written with are in order too.  The compiled
codec's hand-written C follows the same layers: each file is the twin of the Python module beside it, and the
generator puts them in layer by layer.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = {"replwire.schema": ROOT / "schema", "replwire.codec": ROOT / "codec", "replwire.spark": ROOT / "spark"}

#: Each part of the package and its layer; a part imports only from its own part and lower layers.
LAYERS: dict[str, int] = {
    "replwire.schema": 0,
    "replwire.codec.errors": 1,
    "replwire.codec.scalars": 1,
    "replwire.codec.gc_tuning": 1,
    "replwire.codec.malloc_tuning": 1,
    "replwire.codec.walker": 2,
    "replwire.codec.messages": 2,
    "replwire.codec.options": 2,
    "replwire.codec.wire": 3,
    "replwire.codec.stream": 4,
    "replwire.codec.io": 5,
    "replwire.codec.split": 6,
    "replwire.codec.testing": 6,
    "replwire.codec.docs": 6,
    "replwire.codec.serve": 6,
    "replwire.codec.decode": 7,
    "replwire.codec.decode_output": 8,
    "replwire.codec.cli": 9,
    "replwire.spark": 9,
}
TOP = max(LAYERS.values())

#: The building blocks of the declarations, in order: each imports only those before it, and the message
#: families (the rest of replwire.schema) are written with them.
SCHEMA_BLOCKS = ["replwire.schema.wire_error", "replwire.schema.encodings", "replwire.schema.constructs",
                 "replwire.schema.fields", "replwire.schema.message_spec"]


def part(module: str) -> str | None:
    """The part of the package ``module`` belongs to (the longest prefix in :data:`LAYERS`)."""
    best = None
    for name in LAYERS:
        if (module == name or module.startswith(name + ".")) and (best is None or len(name) > len(best)):
            best = name
    return best


def modules() -> list[tuple[str, pathlib.Path]]:
    found = []
    for package, directory in SOURCES.items():
        for path in sorted(directory.rglob("*.py")):
            relative = path.relative_to(directory).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            found.append((".".join([package, *parts]), path))
    return found


def imported(module: str, path: pathlib.Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every replwire module that ``path`` imports (``from X import y`` names ``X.y``
    when ``X.y`` is a module, else ``X``)."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    known = {name for name, _ in modules()}
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("replwire")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("replwire"):
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.append((node.lineno, full if full in known else target))
    return out


def test_the_layer_table_covers_every_module():
    assert [name for name, _ in modules() if part(name) is None and name not in SOURCES] == []


@pytest.mark.parametrize(("module", "path"), modules(), ids=[name for name, _ in modules()])
def test_imports_only_go_down(module, path):
    if module == "replwire.codec":
        return  # the public facade: it gathers the package for users
    own = part(module)
    wrong = []
    for line, target in imported(module, path):
        if target == "replwire.codec":
            if LAYERS[own] < TOP:
                wrong.append(f"line {line}: imports the package facade replwire.codec")
            continue
        other = part(target)
        if other is None or other == own or own is None:
            continue
        if LAYERS[other] >= LAYERS[own]:
            wrong.append(f"line {line}: {target} ({other}, layer {LAYERS[other]}) from layer {LAYERS[own]}")
    assert wrong == [], f"{module} imports upward or sideways:\n" + "\n".join(wrong)


@pytest.mark.parametrize("block", SCHEMA_BLOCKS)
def test_a_schema_building_block_imports_only_the_blocks_before_it(block):
    path = dict(modules())[block]
    below = SCHEMA_BLOCKS[: SCHEMA_BLOCKS.index(block)]
    wrong = [f"line {line}: {target}" for line, target in imported(block, path) if target not in below]
    assert wrong == [], f"{block} imports what is not below it:\n" + "\n".join(wrong)


def test_the_check_sees_an_upward_import(tmp_path):
    """The checker itself: a stream module importing the CLI is reported."""
    path = tmp_path / "decoder.py"
    path.write_text("from ..cli import main\n", encoding="utf-8")
    (line, target), = imported("replwire.codec.stream.decoder", path)
    assert (line, part(target)) == (1, "replwire.codec.cli")
    assert LAYERS[part(target)] > LAYERS["replwire.codec.stream"]


# -- the C twins ---------------------------------------------------------------------------------------------

def twins_found() -> list[str]:
    """The hand-written C files of the package (the generated ``_compiled.c`` left out), relative to codec/."""
    codec = SOURCES["replwire.codec"]
    return sorted(p.relative_to(codec).as_posix() for p in codec.rglob("*.c") if p.name != "_compiled.c")


def twin_module(twin: str) -> str:
    return "replwire.codec." + twin.removesuffix(".c").replace("/", ".")


def test_each_c_file_is_the_twin_of_the_python_module_beside_it():
    """The compiled codec's hand-written C lives beside the Python module whose work it does, named after it
    (none in wire/gen, which generates one message at a time), and the generator puts every one of them in."""
    from replwire.codec.wire.gen.c_module import TWINS

    codec = SOURCES["replwire.codec"]
    found = twins_found()
    assert sorted(TWINS) == found
    assert [t for t in found if not (codec / t).with_suffix(".py").is_file()] == []
    assert [t for t in found if t.startswith("wire/")] == []


def test_the_c_twins_go_in_in_the_order_of_their_layers():
    """A twin uses only what the twins before it define: the generator puts them in layer by layer, as the
    Python modules import down."""
    from replwire.codec.wire.gen.c_module import TWINS

    layers = [LAYERS[part(twin_module(t))] for t in TWINS]
    assert layers == sorted(layers), list(zip(TWINS, layers))
