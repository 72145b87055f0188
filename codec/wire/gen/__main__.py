"""``python -m replwire.codec.wire.gen``: write the fast codec's generated module from the declarations."""

from .generate import MODULE, write

if __name__ == "__main__":
    print(f"{'wrote' if write() else 'up to date:'} {MODULE}")
