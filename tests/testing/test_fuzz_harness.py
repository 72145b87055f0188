"""The coverage-guided harness: its invariant check, its seeds, and ``replwire fuzz`` run as a user runs it."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import types

import pytest

from replwire.codec import Begin, DecodeError
from replwire.codec.testing import fuzz, strategies
from replwire.codec.testing.strategies import Context
from replwire.codec.wire import reference
from tests.support.seeds import ALL

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: the console script installed beside this interpreter (the one the tests run under)
REPLWIRE = shutil.which("replwire", path=os.path.dirname(sys.executable)) or "replwire"
BEGIN = bytes.fromhex("42000000000169e5a80002894463074dc800000313")
P1 = Context("logical", 1)


def planted_target(raw: bytes) -> None:
    """The harness's own target, plus a planted bug: a Begin of xid 0xC0FFEE."""
    message = fuzz.check(*fuzz.split(raw))
    if isinstance(message, Begin) and message.xid == 0xC0FFEE:
        raise KeyError("planted")


def test_check_gives_the_message_or_none():
    assert fuzz.check(P1, BEGIN) == reference.parse(BEGIN, proto_version=1)
    assert fuzz.check(P1, BEGIN[:-1]) is None
    assert fuzz.check(Context("envelope", sender="client"), b"") is None


class RebuildsWrong(Context):
    def build(self, message, codec=reference):
        return super().build(message, codec) + b"\x00"


class LiesAboutOffsets(Context):
    def parse(self, data, codec=reference):
        raise DecodeError("lying", offset=len(data) + 1, tag=chr(data[0]), proto_version=self.proto_version)


def test_check_reports_what_breaks_the_invariant():
    with pytest.raises(fuzz.Finding, match="rebuilds to"):
        fuzz.check(RebuildsWrong("logical", 1), BEGIN)
    with pytest.raises(fuzz.Finding, match="offset 22 outside the 21-byte input"):
        fuzz.check(LiesAboutOffsets("logical", 1), BEGIN)


def _parse_differently(data, *, proto_version, in_stream=False, encoding="utf-8"):
    if len(data) == len(BEGIN):
        return reference.parse(BEGIN[:-1] + b"\x14", proto_version=proto_version)
    raise DecodeError("differently", offset=0, tag="B", message="Begin", proto_version=proto_version)


#: A codec that differs from the reference path in everything.
DISAGREES = types.SimpleNamespace(__name__="disagrees", parse=_parse_differently, build=reference.build)


def test_check_runs_other_codecs_differentially():
    assert fuzz.other_codecs()  # the fast codec
    with pytest.raises(fuzz.Finding, match="disagrees parses .* to Begin"):
        fuzz.check(P1, BEGIN, codecs=(DISAGREES,))
    with pytest.raises(fuzz.Finding, match="disagrees refuses .* with «Begin at offset 0"):
        fuzz.check(P1, BEGIN[:-1], codecs=(DISAGREES,))


def test_inputs_carry_their_context():
    for context in strategies.all_contexts():
        assert fuzz.split(fuzz.join(context, BEGIN)) == (context, BEGIN)
    assert fuzz.split(b"") == (strategies.all_contexts()[0], b"")
    assert fuzz.split(bytes([len(fuzz.CONTEXTS)]) + b"B")[0] == fuzz.CONTEXTS[0]  # any first byte picks one


def test_inputs_with_the_high_bit_first_fuzz_the_encoder(monkeypatch):
    assert [fuzz.drives_encoder(raw, "both") for raw in (b"", b"\x08B", b"\x80", b"\xffB")] == [
        False, False, True, True]
    assert fuzz.drives_encoder(b"\x00", "encoder") and not fuzz.drives_encoder(b"\xff", "decoder")
    assert fuzz.replay(b"\x80" + bytes(16)) is None  # the simplest draw: a valid Begin, checked everywhere
    given: list[bytes] = []
    monkeypatch.setattr(fuzz, "_encoder_target", lambda: given.append)
    assert fuzz.replay(b"\x81abc") is None and fuzz.replay(b"\x01abc", fuzz_mode="encoder") is None
    assert given == [b"abc", b"abc"]
    assert "KeyError" in fuzz.replay(fuzz.join(P1, BEGIN[:-4] + (0xC0FFEE).to_bytes(4, "big")),
                                     "tests.testing.test_fuzz_harness:planted_target", "decoder")


def test_encoder_checks_report_what_breaks_the_invariant():
    begin = reference.parse(BEGIN, proto_version=1)
    fuzz.check_case(strategies.Case(begin, P1))
    with pytest.raises(fuzz.Finding, match="disagrees disagrees on Begin"):
        fuzz.check_case(strategies.Case(begin, P1), codecs=(DISAGREES,))
    damaged = strategies.Invalid(strategies.Case(Begin(final_lsn=1, commit_time=2, xid=-1), P1), "xid", "by hand")
    fuzz.check_invalid(damaged)
    with pytest.raises(fuzz.Finding, match="naming 'xid', not 'final_lsn'"):
        fuzz.check_invalid(strategies.Invalid(damaged.case, "final_lsn", "by hand"))
    with pytest.raises(fuzz.Finding, match="reference builds Begin"):
        fuzz.check_invalid(strategies.Invalid(strategies.Case(begin, P1), "xid", "not damaged at all"))


def test_a_hang_or_memory_finding_is_saved_without_replaying_it(tmp_path):
    artifact = tmp_path / "timeout-0123456789abcdef"
    artifact.write_bytes(fuzz.join(Context("logical", 4, True), b"I\x00"))
    log = "#12 NEW ...\n==1== ERROR: libFuzzer: timeout after 10 seconds\nSUMMARY: libFuzzer: timeout\n"
    saved = json.loads(fuzz.save_reproducer(artifact, log).read_text())
    assert saved["vector"] == {"name": "fuzz_timeout_0123456789abcdef", "layer": "logical",
                               "ctx": {"proto_version": 4, "in_stream": True}, "wire": ["4900 found by replwire fuzz"]}
    assert saved["failure"].startswith("ERROR: libFuzzer: timeout after 10 seconds")


def test_reproduce_replays_a_raw_input_or_its_json_reproducer(tmp_path):
    """What ``replwire fuzz --reproduce`` runs, without the command: the raw input and the vector saved beside
    it give the same failure; an input the invariant holds for gives ``None``."""
    planted = "tests.testing.test_fuzz_harness:planted_target"
    crash = tmp_path / "crash-0123456789abcdef"
    crash.write_bytes(fuzz.join(Context("logical", 2), BEGIN[:-4] + (0xC0FFEE).to_bytes(4, "big")))
    saved = fuzz.save_reproducer(crash, "log", planted)
    assert "KeyError: 'planted'" in fuzz.reproduce(crash, planted)
    assert "KeyError: 'planted'" in fuzz.reproduce(saved, planted)
    fine = tmp_path / "fine"
    fine.write_bytes(fuzz.join(P1, BEGIN))
    assert fuzz.reproduce(fine, planted) is None and fuzz.reproduce(saved) is None
    encoder = tmp_path / "timeout-encoder"
    encoder.write_bytes(bytes([fuzz.ENCODER_MODE, 1, 2, 3]))
    assert json.loads(fuzz.save_reproducer(encoder, "ERROR: libFuzzer: timeout").read_text())["mode"] == "both"
    assert fuzz.reproduce(encoder.with_name(encoder.name + ".json")) is None


def test_other_client_encodings_are_fuzzed_too(tmp_path):
    sql_ascii = Context("logical", 1, encoding="SQL_ASCII")
    relation = b"R\x00\x00\x40\x00" + b"\xff\0caf\xe9\0d\x00\x00"  # names that are not UTF-8
    assert fuzz.CONTEXTS[:len(strategies.all_contexts())] == strategies.all_contexts()  # old inputs keep theirs
    assert fuzz.split(fuzz.join(sql_ascii, relation)) == (sql_ascii, relation)
    assert fuzz.check(*fuzz.split(fuzz.join(sql_ascii, relation))).name == "caf\udce9"
    assert fuzz.check(P1, relation) is None  # a DecodeError in UTF-8
    artifact = tmp_path / "timeout-0123456789abcdef"
    artifact.write_bytes(fuzz.join(sql_ascii, relation))
    saved = json.loads(fuzz.save_reproducer(artifact, "ERROR: libFuzzer: timeout").read_text())
    assert saved["vector"]["ctx"] == {"proto_version": 1, "in_stream": False, "encoding": "SQL_ASCII"}
    (tmp_path / "v.json").write_text(json.dumps({"vectors": [saved["vector"]]}))
    assert fuzz.load_seed_file(tmp_path / "v.json") == [(sql_ascii, relation)]


def test_seed_files_are_the_shared_seeds():
    loaded = set(fuzz.load_seeds(fuzz.default_seed_paths(ROOT)))
    shared = {(Context("envelope", sender=s.sender) if s.layer == "envelope" else
               Context("logical", s.proto_version, s.in_stream), s.data) for s in ALL}
    assert shared <= loaded
    assert len(loaded - shared) > 10  # and the error vectors too
    assert fuzz.default_seed_paths(ROOT / "codec") == []


def test_generated_seeds_cover_every_class_in_every_context():
    seeds = fuzz.generated_seeds(per_class=1)
    pairs = {(context, reference.LOGICAL_CLASSES.get(chr(data[0])) if context.layer == "logical" else
              reference.ENVELOPE_CLASSES[context.sender][chr(data[0])]) for context, data in seeds}
    assert pairs == {(c, cls) for cls in strategies.classes_of() for c in strategies.contexts(cls)}


def run(*args, cwd, env=None):
    return subprocess.run([REPLWIRE, "fuzz", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def test_fuzz_command_runs_clean_from_anywhere(tmp_path):
    result = run("--seconds", "2", "--artifacts", "found", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no files and the declarations" in result.stdout  # no checkout here: seeds from the declarations
    assert "runs in" in result.stdout and "exec/s" in result.stdout
    assert sorted(p.name for p in (tmp_path / "found").iterdir()) == ["last-run.log"]


def test_fuzz_command_saves_a_reproducer_and_fails_on_a_finding(tmp_path):
    trigger = BEGIN[:-4] + (0xC0FFEE).to_bytes(4, "big")
    (tmp_path / "seed.json").write_text(json.dumps({"vectors": [
        {"name": "trigger", "layer": "logical", "ctx": {"proto_version": 2}, "wire": [trigger.hex() + " note"]}]}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    target = ("--target", "tests.testing.test_fuzz_harness:planted_target")
    result = run("--seconds", "30", "--seeds", "seed.json", *target, cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "FINDING: reproducer saved to" in result.stderr
    (crash,) = (tmp_path / "fuzz-findings").glob("crash-*.json")
    saved = json.loads(crash.read_text())
    assert saved["vector"]["ctx"] == {"proto_version": 2, "in_stream": False}
    assert bytes.fromhex(saved["vector"]["wire"][0].split()[0]) == trigger
    assert "KeyError: 'planted'" in saved["failure"]
    replayed = run("--reproduce", str(crash), *target, cwd=tmp_path, env=env)
    assert replayed.returncode == 1 and "FAILS" in replayed.stdout
    (tmp_path / "fine").write_bytes(fuzz.join(P1, BEGIN))
    assert run("--reproduce", "fine", *target, cwd=tmp_path, env=env).returncode == 0


def test_fuzz_command_says_what_is_missing(tmp_path):
    hide = "import sys; sys.modules['atheris'] = None; from replwire.codec.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", hide, "fuzz", "--seconds", "1"], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 1
    assert ("replwire fuzz needs atheris, which is not installed: pip install 'hypothesis>=6.100' 'atheris>=2.3' "
            "(replwire's 'fuzz' extra)") in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
