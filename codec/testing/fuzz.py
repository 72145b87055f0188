"""The coverage-guided fuzz harness: atheris (libFuzzer) on the decoder and encoder (``replwire[fuzz]``).

The fuzz target's invariant: **any input either parses to a message that rebuilds to exactly the same
bytes, or raises** :class:`~replwire.codec.DecodeError` **with an offset inside the input -- anything
else is a finding**: another exception (``EncodeError`` on rebuilding included), different bytes after
a rebuild, a hang (libFuzzer's ``-timeout``), or memory growing far beyond the input (``-rss_limit_mb``).
Every other codec (the generated fast codec) must give the same message and bytes, or the same
``DecodeError`` (reason, offset, field, tag, protocol version).  Inputs whose first byte has its high bit
set fuzz the encoder instead: they drive the strategies derived from the declarations (Hypothesis'
``fuzz_one_input``), and the drawn message must build in every context where it fits and parse back to
itself, or -- damaged -- be refused with an :class:`~replwire.codec.EncodeError` naming the damaged
field, by every codec alike.

Strategy: a decoder input is one context byte (an index into :data:`CONTEXTS`: each protocol version in and
out of a stream, each envelope side, then the protocol versions again in other client encodings) followed by
the message bytes.  :func:`check`, :func:`check_case` and
:func:`check_invalid` are the invariants; the property tests run the same functions on Hypothesis-made
inputs.  ``replwire fuzz`` (:func:`run`) writes the seed corpus -- the golden vectors and real captures
when run from a checkout, plus messages drawn from the declarations -- and runs libFuzzer in a child
process (``python -m replwire.codec.testing.fuzz``), so a crash, a hang or a memory blow-up in the child is
reported by the parent, which saves a reproducer for each finding (the raw input, and a JSON vector ready
to become a permanent regression vector) and exits non-zero.  ``--reproduce`` replays saved inputs (:func:`reproduce`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ...schema.encodings import UTF8
from ..errors import DecodeError, EncodeError
from ..messages import WireMessage
from ..wire import fast, reference
from . import strategies
from .strategies import Case, Context, Invalid, all_contexts

__all__ = ["CONTEXTS", "Context", "ENCODER_MODE", "FINDING_PREFIXES", "Finding", "INSTRUMENTED", "MODES",
           "OTHER_ENCODINGS", "Report", "check", "check_case", "check_invalid", "default_seed_paths", "drives_encoder",
           "fuzz_one_input", "generated_seeds", "join", "load_seed_file", "load_seeds", "other_codecs", "replay",
           "reproduce", "run", "save_reproducer", "split", "target_seeds", "write_corpus"]

#: The client encodings fuzzed besides UTF-8: one byte per character, SQL_ASCII's bytes unconverted, and a
#: multibyte encoding whose trail bytes can be ASCII.
OTHER_ENCODINGS = ("LATIN1", "SQL_ASCII", "SJIS")
#: The decoder's contexts, indexed by an input's first byte: :func:`all_contexts` (UTF-8), then the logical
#: ones again in each of :data:`OTHER_ENCODINGS` (appended, so that earlier inputs keep their context).
CONTEXTS = all_contexts() + tuple(dataclasses.replace(c, encoding=e) for e in OTHER_ENCODINGS
                                  for c in all_contexts() if c.layer == "logical")
FINDING_PREFIXES = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")


class Finding(AssertionError):
    """The fuzz invariant does not hold for an input."""


def other_codecs() -> tuple[ModuleType, ...]:
    """The codecs run differentially against the reference path: the generated fast codec."""
    return (fast,)


def check(context: Context, data: bytes, codecs: tuple[ModuleType, ...] | None = None) -> object | None:
    """The invariant for one input: returns the parsed message, or ``None`` when ``data`` is refused
    with a well-formed :class:`DecodeError`; raises :class:`Finding` (or lets any other exception out)
    otherwise.  Each of ``codecs`` (default :func:`other_codecs`) must give the same message and the
    same bytes, or the same ``DecodeError`` (reason, offset, field, tag, message, protocol version)."""
    codecs = other_codecs() if codecs is None else codecs
    try:
        message = context.parse(data)
    except DecodeError as error:
        _check_error(context, data, error)
        for codec in codecs:
            _same_error(context, data, error, codec)
        return None
    rebuilt = context.build(message)
    if rebuilt != data:
        raise Finding(f"{message!r} parsed from {data.hex()} ({context}) rebuilds to {rebuilt.hex()}")
    for codec in codecs:
        theirs = context.parse(data, codec)
        if theirs != message or type(theirs) is not type(message):
            raise Finding(f"{codec.__name__} parses {data.hex()} ({context}) to {theirs!r}, not {message!r}")
        if context.build(message, codec) != rebuilt:
            raise Finding(f"{codec.__name__} builds {message!r} ({context}) to other bytes")
    return message


def _check_error(context: Context, data: bytes, error: DecodeError) -> None:
    if not 0 <= error.offset <= len(data):
        raise Finding(f"DecodeError offset {error.offset} outside the {len(data)}-byte input: {error}") from error
    if context.layer == "logical" and error.proto_version != context.proto_version:
        raise Finding(f"DecodeError says proto {error.proto_version}, parsed under {context}") from error
    if data and error.tag != chr(data[0]):
        raise Finding(f"DecodeError says tag {error.tag!r}, the input starts with {data[:1]!r}") from error
    if not str(error):
        raise Finding("DecodeError without a message") from error


def _decode_error_key(error: DecodeError) -> tuple[object, ...]:
    return error.reason, error.offset, error.field, error.tag, error.message, error.proto_version


def _same_error(context: Context, data: bytes, error: DecodeError, codec: ModuleType) -> None:
    try:
        theirs = context.parse(data, codec)
    except DecodeError as other:
        if _decode_error_key(other) != _decode_error_key(error):
            raise Finding(f"{codec.__name__} refuses {data.hex()} ({context}) with «{other}», the reference "
                          f"with «{error}»") from other
        return
    raise Finding(f"{codec.__name__} parses {data.hex()} ({context}) to {theirs!r}; the reference refuses "
                  f"it: {error}")


def check_case(case: Case, codecs: tuple[ModuleType, ...] | None = None) -> None:
    """The encoder invariant for a valid message: in every context of its class (in the case's encoding)
    where it fits it builds, parses back to itself, and every codec agrees; in every other context building
    refuses it."""
    codecs = other_codecs() if codecs is None else codecs
    for context in strategies.contexts(type(case.message)):
        if context.layer == "logical":
            context = dataclasses.replace(context, encoding=case.context.encoding)
        here = Case(case.message, context)
        if strategies.fits(here):
            data = here.build()
            if context.parse(data) != case.message:
                raise Finding(f"{case.message!r} built in {context} parses back as {context.parse(data)!r}")
            for codec in codecs:
                if context.build(case.message, codec) != data or context.parse(data, codec) != case.message:
                    raise Finding(f"{codec.__name__} disagrees on {case.message!r} in {context}")
        else:
            for codec in (reference, *codecs):
                try:
                    data = context.build(case.message, codec)
                except EncodeError:
                    continue
                raise Finding(f"{codec.__name__} builds {case.message!r} in {context}, where it does not fit")


def check_invalid(invalid: Invalid, codecs: tuple[ModuleType, ...] | None = None) -> None:
    """The encoder invariant for a damaged message: every codec refuses it with an ``EncodeError`` that
    names the damaged field (and the message class), and all say the same."""
    codecs = other_codecs() if codecs is None else codecs
    case = invalid.case
    first = None
    for codec in (reference, *codecs):
        try:
            data = case.context.build(case.message, codec)
        except EncodeError as error:
            named = (error.field, error.message) == (invalid.field, type(case.message).__name__) \
                if invalid.field is not None else error.field is None
            if not named:
                raise Finding(f"{codec.__name__} refuses {case.message!r} ({invalid.how}) in {case.context} "
                              f"naming {error.field!r}, not {invalid.field!r}: {error}") from error
            if first is not None and str(error) != str(first):
                raise Finding(f"{codec.__name__} refuses {case.message!r} with «{error}», the reference with "
                              f"«{first}»") from error
            first = first or error
            continue
        raise Finding(f"{codec.__name__} builds {case.message!r} ({invalid.how} at {invalid.field}) in "
                      f"{case.context}: {data.hex()}")


def split(raw: bytes) -> tuple[Context, bytes]:
    """A fuzz input as (context, message bytes): the first byte picks the context."""
    if not raw:
        return CONTEXTS[0], b""
    return CONTEXTS[raw[0] % len(CONTEXTS)], raw[1:]


def join(context: Context, data: bytes) -> bytes:
    """The fuzz input for ``data`` in ``context`` (the inverse of :func:`split`)."""
    return bytes([CONTEXTS.index(context)]) + data


#: A first byte from this one on makes an input drive the encoder strategies (see :func:`fuzz_one_input`).
ENCODER_MODE = 0x80


#: What :func:`fuzz_one_input` fuzzes: ``both`` (by the first byte), ``decoder`` or ``encoder`` only.
MODES = ("both", "decoder", "encoder")
mode = "both"


def fuzz_one_input(raw: bytes) -> None:
    """The libFuzzer entry point: a decoder input, or (first byte >= :data:`ENCODER_MODE`, or any input
    in ``encoder`` :data:`mode`) the choices for drawing a message or a damaged message."""
    if drives_encoder(raw, mode):
        _encoder_target()(raw[1:])
    else:
        check(*split(raw))


def drives_encoder(raw: bytes, fuzz_mode: str) -> bool:
    """Whether ``raw`` is an encoder input in ``fuzz_mode``."""
    return fuzz_mode == "encoder" or (fuzz_mode == "both" and bool(raw) and raw[0] >= ENCODER_MODE)


@functools.cache
def _encoder_target() -> Callable[[bytes], object]:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.one_of(strategies.cases(), strategies.invalid_cases()))
    def encoder(item: Case | Invalid) -> None:
        check_case(item) if isinstance(item, Case) else check_invalid(item)

    # given() is typed as returning a plain callable, without the .hypothesis handle it attaches
    fuzz: Callable[[bytes], object] = encoder.hypothesis.fuzz_one_input  # type: ignore[attr-defined]
    return fuzz


# ---------------------------------------------------------------------------------------------------------
# seeds


def _vector_wire(fields: list[str]) -> bytes:
    """A golden vector's ``wire``: each entry is hex tokens, then a note."""
    out = bytearray()
    for item in fields:
        for token in item.split():
            try:
                out += bytes.fromhex(token)
            except ValueError:
                break
    return bytes(out)


def _context_of(layer: str, ctx: dict[str, Any], sender: str | None) -> Context:
    if layer == "envelope":
        return Context("envelope", sender=sender)
    return Context("logical", ctx.get("proto_version"), bool(ctx.get("in_stream", False)),
                   encoding=ctx.get("encoding", UTF8))


def load_seed_file(path: pathlib.Path) -> list[tuple[Context, bytes]]:
    """The messages of a golden-vector file (``{"vectors": [...]}``) or of a stored capture
    (``{"messages": [{"hex": ...}]}``), each with its context."""
    content = json.loads(path.read_text(encoding="utf-8"))
    if "vectors" in content:
        return [(_context_of(v["layer"], v.get("ctx", {}), v.get("sender")), _vector_wire(v["wire"]))
                for v in content["vectors"]]
    layer = content.get("layer", "logical")
    return [(_context_of(layer, {"proto_version": content.get("proto_version"), "in_stream": row.get("in_stream")},
                         row.get("sender")), bytes.fromhex(row["hex"]))
            for row in content.get("messages", [])]


def load_seeds(paths: Iterable[pathlib.Path]) -> list[tuple[Context, bytes]]:
    """Seeds from files and directories of JSON files (see :func:`load_seed_file`)."""
    seeds = []
    for path in paths:
        for file in sorted(path.glob("*.json")) if path.is_dir() else [path]:
            seeds += load_seed_file(file)
    return seeds


def default_seed_paths(root: pathlib.Path | None = None) -> list[pathlib.Path]:
    """The golden vectors and the stored real-server captures, when run from a replwire checkout."""
    root = pathlib.Path.cwd() if root is None else root
    return [p for p in (root / "tests" / "vectors", root / "tests" / "captures") if p.is_dir()]


def generated_seeds(per_class: int = 4) -> list[tuple[Context, bytes]]:
    """Messages drawn from the declarations: ``per_class`` for every message class and context."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as fixed_seed

    from . import strategies

    found: list[tuple[Context, bytes]] = []

    def collector(cls: type[WireMessage], context: Context) -> Callable[[], None]:
        @fixed_seed(0)
        @settings(max_examples=per_class, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(strategies.messages(cls, context))
        def collect(message: WireMessage) -> None:
            found.append((context, context.build(message)))

        return collect

    for cls in strategies.classes_of():
        for context in strategies.contexts(cls):
            collector(cls, context)()
    return found


def write_corpus(directory: pathlib.Path, inputs: Iterable[bytes]) -> int:
    """Write each input as a fuzz input file named by its hash; returns the number of distinct inputs."""
    directory.mkdir(parents=True, exist_ok=True)
    names = set()
    for raw in inputs:
        name = hashlib.sha1(raw).hexdigest()
        names.add(name)
        (directory / name).write_bytes(raw)
    return len(names)


def target_seeds(spec: str) -> list[bytes]:
    """The seed inputs of a ``module:function`` target: its module's ``SEEDS`` (raw inputs), if any."""
    module, _, _ = spec.partition(":")
    return list(getattr(importlib.import_module(module), "SEEDS", ()))


# ---------------------------------------------------------------------------------------------------------
# running


@dataclass
class Report:
    """What a run did: libFuzzer's final counts, and the findings saved (reproducer JSON paths)."""

    returncode: int
    runs: int | None
    seconds: int | None
    execs_per_second: int | None
    coverage: int | None
    corpus: int | None
    findings: list[pathlib.Path]
    log: pathlib.Path

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.findings


def run(seconds: int, artifacts: pathlib.Path, *, corpus: pathlib.Path | None = None,
        seed_paths: Iterable[pathlib.Path] = (), max_len: int = 4096, timeout: int = 10,
        rss_limit_mb: int = 512, target: str | None = None, fuzz_mode: str = "both",
        echo: Callable[[str], None] = print) -> Report:
    """Fuzz for ``seconds`` (libFuzzer time, after start-up) in ``fuzz_mode`` (one of :data:`MODES`);
    findings go to ``artifacts``.  An input running longer than ``timeout`` seconds, or the process
    growing past ``rss_limit_mb`` (it idles at about 70 MB; inputs are at most ``max_len`` bytes), is a
    finding too."""
    artifacts.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in artifacts.iterdir()}
    with tempfile.TemporaryDirectory(prefix="replwire-fuzz-") as scratch:
        corpus_dir = corpus or pathlib.Path(scratch) / "corpus"
        inputs = target_seeds(target) if target else []
        if inputs:  # a target of its own input layout (the row path's, serve's) brings its own seeds
            source = f"the SEEDS beside {target}"
        else:
            seeds = load_seeds(seed_paths) + generated_seeds()
            inputs = [join(context, data) for context, data in seeds]
            source = f"{', '.join(str(p) for p in seed_paths) or 'no files'} and the declarations"
        count = write_corpus(corpus_dir, inputs)
        echo(f"replwire fuzz: {count} seed inputs ({len(inputs)} seeds from {source}), {seconds} s")
        log = artifacts / "last-run.log"
        command = [sys.executable, "-m", "replwire.codec.testing.fuzz", "--mode", fuzz_mode,
                   *(["--target", target] if target else []),
                   f"-max_total_time={seconds}", f"-timeout={timeout}", f"-rss_limit_mb={rss_limit_mb}",
                   f"-max_len={max_len}", f"-artifact_prefix={artifacts}{os.sep}", "-print_final_stats=1",
                   str(corpus_dir)]
        with log.open("wb") as out:
            try:
                returncode = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT,
                                            timeout=seconds + 300).returncode
            except subprocess.TimeoutExpired:
                returncode = -1
    text = log.read_text(errors="replace")
    findings = [save_reproducer(artifacts / name, text, target, fuzz_mode)
                for name in sorted(p.name for p in artifacts.iterdir())
                if name.startswith(FINDING_PREFIXES) and name not in before and not name.endswith(".json")]
    return Report(returncode, runs=_stat(text, r"Done (\d+) runs"),
                  seconds=_stat(text, r"Done \d+ runs in (\d+) second"),
                  execs_per_second=_stat(text, r"DONE .*exec/s: (\d+)"), coverage=_stat(text, r"DONE +cov: (\d+)"),
                  corpus=_stat(text, r"DONE .*corp: (\d+)"), findings=findings, log=log)


def _stat(text: str, pattern: str) -> int | None:
    match = re.search(pattern, text)
    return int(match.group(1)) if match else None


def save_reproducer(path: pathlib.Path, log: str, target: str | None = None, fuzz_mode: str = "both") -> pathlib.Path:
    """Write ``<artifact>.json`` beside a libFuzzer artifact: the input as a vector (context and hex, in
    the golden-vector layout), what went wrong, and the command that replays it."""
    raw = path.read_bytes()
    context, data = split(raw)
    if path.name.startswith("crash-"):
        failure = replay(raw, target, fuzz_mode) or "no failure when replayed in a fresh process"
    else:
        failure = log[log.rfind("ERROR: libFuzzer"):][:2000] or path.name.split("-")[0]
    out = path.with_name(path.name + ".json")
    if drives_encoder(raw, fuzz_mode):  # the failure names the message object; there is no wire vector
        out.write_text(json.dumps({"encoder": raw.hex(), "mode": fuzz_mode, "failure": failure,
                                   "replay": f"replwire fuzz --mode {fuzz_mode} --reproduce {path}"},
                                  indent=2) + "\n")
        return out
    vector: dict[str, Any] = {"name": f"fuzz_{path.name.replace('-', '_')[:24]}", "layer": context.layer}
    if context.layer == "logical":
        vector["ctx"] = {"proto_version": context.proto_version, "in_stream": context.in_stream}
        if context.encoding != UTF8:
            vector["ctx"]["encoding"] = context.encoding
    else:
        vector["sender"] = context.sender
    vector["wire"] = [f"{data.hex()} found by replwire fuzz"]
    out.write_text(json.dumps({"vector": vector, "failure": failure,
                               "replay": f"replwire fuzz --reproduce {path}"}, indent=2) + "\n")
    return out


def replay(raw: bytes, target: str | None = None, fuzz_mode: str = "both") -> str | None:
    """Run one fuzz input through the target in ``fuzz_mode``; ``None`` when the invariant holds, else
    the traceback."""
    global mode
    saved, mode = mode, fuzz_mode
    try:
        _target(target)(raw)
    except Exception:  # noqa: BLE001 -- any exception is what is being reported
        return traceback.format_exc()
    finally:
        mode = saved
    return None


def _target(spec: str | None) -> Callable[[bytes], None]:
    """The target: :func:`fuzz_one_input`, or ``module:function`` (for testing the harness itself)."""
    if not spec:
        return fuzz_one_input
    module, _, name = spec.partition(":")
    target: Callable[[bytes], None] = getattr(importlib.import_module(module), name)
    return target


def reproduce(path: pathlib.Path, target: str | None = None, fuzz_mode: str = "both") -> str | None:
    """Replay one saved input (``replwire fuzz --reproduce``): a raw libFuzzer artifact, run in
    ``fuzz_mode``, or the JSON reproducer :func:`save_reproducer` wrote beside it, which records its own
    mode and, for a decoder input, its context and bytes as a golden vector.  ``None`` when the invariant
    holds, else the traceback (see :func:`replay`)."""
    raw, mode = path.read_bytes(), fuzz_mode
    if path.suffix == ".json":
        saved = json.loads(raw)
        if "encoder" in saved:
            raw, mode = bytes.fromhex(saved["encoder"]), saved["mode"]
        else:
            vector, mode = saved["vector"], "decoder"
            context = _context_of(vector["layer"], vector.get("ctx", {}), vector.get("sender"))
            raw = join(context, _vector_wire(vector["wire"]))
    return replay(raw, target, mode)


#: Whose code libFuzzer gets coverage feedback from (instrumenting everything loaded takes a minute).
INSTRUMENTED = ("replwire.", "construct")


def _instrument(atheris: ModuleType) -> int:  # pragma: no cover -- runs in the libFuzzer child process
    """Instrument the functions of the modules in :data:`INSTRUMENTED` (methods included)."""
    import gc
    import types

    count = 0
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and (obj.__module__ or "").startswith(INSTRUMENTED) \
                and obj.__module__ != __name__:
            atheris.instrument_func(obj)
            count += 1
    return count


def _child(argv: list[str]) -> None:  # pragma: no cover -- runs in the libFuzzer child process
    import atheris

    global mode
    ours = {"--mode": "both"}
    while argv[1:2] and argv[1] in ("--target", "--mode"):
        ours[argv[1]] = argv[2]
        argv = argv[:1] + argv[3:]
    target, mode = ours.get("--target"), ours["--mode"]
    function = _target(target)
    _instrument(atheris)
    if target:
        atheris.instrument_func(function)
    atheris.Setup(argv, function)
    atheris.Fuzz()


if __name__ == "__main__":  # pragma: no cover
    _child(sys.argv)
