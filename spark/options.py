"""Spark's data source options, looked up by name whatever the case, and checked: shared by the batch and
the streaming source."""

from __future__ import annotations

from typing import Any

__all__ = ["Options"]


class Options:
    """Spark's options, looked up by name whatever the case (Spark hands them over lower-cased)."""

    def __init__(self, options: Any) -> None:
        self._values = {str(k).lower(): v for k, v in dict(options).items()}

    def get(self, name: str) -> str | None:
        value = self._values.get(name.lower())
        return None if value is None else str(value)

    def boolean(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        lowered = value.strip().lower()
        if lowered in ("true", "on", "1", "yes"):
            return True
        if lowered in ("false", "off", "0", "no"):
            return False
        raise ValueError(f"replwire: option {name} must be true or false, not {value!r}")

    def integer(self, name: str, default: int | None, least: int) -> int | None:
        value = self.get(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"replwire: option {name} must be an integer, not {value!r}") from None
        if number < least:
            raise ValueError(f"replwire: option {name} must be at least {least}, not {number}")
        return number
