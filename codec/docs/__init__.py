"""The protocol reference pages of the documentation site, generated from the declarations."""

__all__: list[str] = []
