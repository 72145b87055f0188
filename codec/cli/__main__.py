"""``python -m replwire.codec.cli``: the ``replwire`` command."""

from .main import main

main()
