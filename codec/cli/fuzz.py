"""``replwire fuzz``: coverage-guided fuzzing of the codec, or the replay of saved findings.

Strategy: a shell over :mod:`replwire.codec.testing.fuzz`, which needs atheris and Hypothesis (the fuzz extra,
said before anything runs): :func:`~replwire.codec.testing.fuzz.run` fuzzes and saves findings,
:func:`~replwire.codec.testing.fuzz.reproduce` replays one; the command prints their report and exits 1 on a
finding.
"""

from __future__ import annotations

import pathlib
import sys

import click

from ..errors import install_hint
from ._common import installed

__all__ = ["fuzz_command"]


@click.command("fuzz")
@click.option("--seconds", type=click.IntRange(1), default=60, show_default=True,
              help="How long to fuzz (libFuzzer time, after a few seconds of start-up).")
@click.option("--artifacts", type=click.Path(file_okay=False, path_type=pathlib.Path),
              default=pathlib.Path("fuzz-findings"), show_default=True,
              help="Where findings are saved: the raw input, and a JSON reproducer beside it.")
@click.option("--corpus", type=click.Path(file_okay=False, path_type=pathlib.Path),
              help="Keep the evolving corpus here (default: a temporary directory).")
@click.option("--seeds", "seed_paths", multiple=True, type=click.Path(exists=True, path_type=pathlib.Path),
              help="Golden-vector or capture JSON files, or directories of them (repeatable). Default: "
                   "tests/vectors and tests/captures under the current directory, when present.")
@click.option("--max-len", type=click.IntRange(2), default=4096, show_default=True,
              help="Longest input libFuzzer makes, in bytes.")
@click.option("--mode", "fuzz_mode", type=click.Choice(["both", "decoder", "encoder"]), default="both",
              show_default=True, help="Fuzz the decoder (bytes), the encoder (message objects drawn from the "
                                      "declarations), or both, by the first byte of each input.")
@click.option("--reproduce", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=pathlib.Path),
              help="Replay saved inputs (raw artifacts or their .json reproducers) instead of fuzzing.")
@click.option("--target", hidden=True, help="module:function to fuzz instead (the row path's and serve's "
                                           "harnesses, and tests of this one); its module's SEEDS start the "
                                           "corpus.")
def fuzz_command(seconds: int, artifacts: pathlib.Path, corpus: pathlib.Path | None,
                 seed_paths: tuple[pathlib.Path, ...], max_len: int, fuzz_mode: str,
                 reproduce: tuple[pathlib.Path, ...], target: str | None) -> None:
    """Coverage-guided fuzzing of the decoder and encoder (atheris); exits 1 on a finding.

    Decoder: any bytes must parse to a message that rebuilds to the same bytes, or raise DecodeError.
    Encoder: a message drawn from the declarations must build and parse back in every context where it
    fits, and a damaged one must raise EncodeError naming the damaged field.  The fast codec must agree
    with the reference path throughout.  Findings are saved under --artifacts with a JSON reproducer.
    """
    missing = [name for name in ("atheris", "hypothesis")[1 if reproduce else 0:] if not installed(name)]
    if missing:
        raise click.ClickException(f"replwire fuzz needs {' and '.join(missing)}, which "
                                   f"{'is' if len(missing) == 1 else 'are'} not installed: "
                                   f"{install_hint('fuzz')}")
    from ..testing import fuzz

    if reproduce:
        failed = 0
        for path in reproduce:
            failure = fuzz.reproduce(path, target, fuzz_mode)
            failed += failure is not None
            click.echo(f"{path}: {'FAILS' if failure else 'ok'}")
            if failure:
                click.echo(failure, err=True)
        sys.exit(1 if failed else 0)
    paths = list(seed_paths) or fuzz.default_seed_paths()
    report = fuzz.run(seconds, artifacts, corpus=corpus, seed_paths=paths, max_len=max_len, target=target,
                      fuzz_mode=fuzz_mode, echo=click.echo)
    click.echo(f"replwire fuzz: {report.runs} runs in {report.seconds} s ({report.execs_per_second} exec/s), "
               f"coverage {report.coverage} edges, corpus {report.corpus} inputs; log: {report.log}")
    for finding in report.findings:
        click.echo(f"FINDING: reproducer saved to {finding}", err=True)
    if not report.ok:
        if not report.findings:
            click.echo(f"error: the fuzzer exited with status {report.returncode}; see {report.log}", err=True)
        sys.exit(1)
