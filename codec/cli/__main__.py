"""``python -m replwire.codec.cli``: the ``replwire`` command."""

from .main import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
