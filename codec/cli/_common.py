"""What several ``replwire`` commands share: counted nouns, replwire's version, whether an optional
dependency is installed (and the refusal of a command that needs psycopg2 without it), and the usage check
of input files that may be COPY-CSV.
"""

from __future__ import annotations

import importlib
import os
import pathlib

import click

from ..errors import install_hint

__all__ = ["count_noun", "installed", "need_proto_version", "need_psycopg2", "not_a_capture_file",
           "replwire_version"]


def count_noun(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``1 change``, ``2 changes``, ``1 unchanged TOAST value``)."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def replwire_version() -> str:
    """replwire's installed version (``unknown`` when it runs from a source tree that is not installed)."""
    from importlib.metadata import PackageNotFoundError, version  # (not at start-up)

    try:
        return version("replwire")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


def installed(module: str) -> bool:
    """Whether ``module`` (an optional dependency: psycopg2, atheris, ...) can be imported."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def need_psycopg2(command: str) -> None:
    """Refuse ``replwire COMMAND`` (a server's command) when psycopg2 is not installed, saying how to install it."""
    if not installed("psycopg2"):
        raise click.ClickException(f"replwire {command} needs psycopg2, which is not installed: "
                                   f"{install_hint('live')}")


def need_proto_version(files: tuple[pathlib.Path, ...], proto_version: int | None) -> None:
    """Refuse, as a usage error, what is no regular file (before anything opens it), and, naming
    ``--proto-version``, a file that is not a capture file when no ``--proto-version`` was given: it is read
    as COPY-CSV, which does not record its protocol version."""
    from ..io.capture_file import CaptureFileError, is_capture_file
    from ..io.segments import check_file

    for path in files:  # (first: a FIFO opened here would be read once, or wait for a writer)
        try:
            check_file(os.fspath(path))
        except CaptureFileError as error:
            raise click.UsageError(str(error)) from None
    if proto_version is None:
        for path in files:
            try:
                capture = is_capture_file(path)
            except OSError as error:
                raise click.UsageError(f"{path}: {error.strerror}") from None
            if not capture:
                raise click.UsageError(not_a_capture_file(path))


def not_a_capture_file(path: str | os.PathLike[str]) -> str:
    """The usage error of an input that is not a capture file, given without ``--proto-version``."""
    return (f"{os.fspath(path)} is not a capture file: to read it as the COPY-CSV of "
            "pg_logical_slot_peek_binary_changes, give --proto-version with the protocol version it was read with")
