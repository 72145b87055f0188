"""``python -m replwire.codec.wire.gen``: write every source generated from the declarations -- the fast
codec's module and the message classes' type-checking blocks."""

from ... import messages
from . import annotations, python_codec

__all__: list[str] = []

if __name__ == "__main__":
    print(f"{'wrote' if python_codec.write() else 'up to date:'} {python_codec.MODULE}")
    print(f"{'wrote' if annotations.write() else 'up to date:'} {messages.__file__}")
