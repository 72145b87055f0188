"""The ``replwire`` command: the click group, its commands, and ``--version``.

Strategy: each command lives in a module of its own under ``cli/`` (``replwire spark`` in
:mod:`replwire.spark.cli`), a thin shell over a library function that reports bad input as a one-line error
with exit status 2 (usage) or 1 (data), never a traceback.  The group knows the commands by name
(:data:`COMMANDS`) and imports a command's module only when that command is run or listed, so a command
loads only what it uses: ``replwire parse`` no decoder, ``replwire decode`` no server, and only
``replwire spark`` the Spark layer, which needs PySpark.
"""

from __future__ import annotations

import importlib

import click

from ..errors import install_hint
from ._common import replwire_version

__all__ = ["COMMANDS", "main"]

#: Each command: the module it is in, and its click command's name there.
COMMANDS = {
    "backfill": ("replwire.codec.cli.backfill", "backfill_command"),
    "capture": ("replwire.codec.cli.capture", "capture_command"),
    "check": ("replwire.codec.cli.check", "check_command"),
    "decode": ("replwire.codec.cli.decode", "decode_command"),
    "demo": ("replwire.codec.cli.demo", "demo_command"),
    "fuzz": ("replwire.codec.cli.fuzz", "fuzz_command"),
    "parse": ("replwire.codec.cli.parse", "parse_command"),
    "serve": ("replwire.codec.cli.serve", "serve_command"),
    "slot": ("replwire.codec.cli.slot", "slot_command"),
    "spark": ("replwire.spark.cli", "spark"),
}


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"replwire, version {replwire_version()}")
        ctx.exit()


class _Commands(click.Group):
    """The command group over :data:`COMMANDS`, each command imported when it is asked for; ``spark`` without
    PySpark installed is an error that says how to install it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name]
        try:
            command: click.Command = getattr(importlib.import_module(module), attribute)
        except ImportError as error:
            if name != "spark":
                raise
            raise click.ClickException(f"'replwire {name}' needs PySpark: {install_hint('spark')} "
                                       f"({error})") from error
        return command


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
def main() -> None:
    """replwire: the PostgreSQL logical replication wire format (pgoutput v1-v4), parsed and built."""


if __name__ == "__main__":  # pragma: no cover
    main()
