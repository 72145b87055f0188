"""griffe extension for the API page: an inspected class attribute gets its type and its own description.

The message classes get their fields from the declarations when ``replwire.codec.messages`` is imported,
so mkdocstrings inspects them (``force_inspection`` in ``mkdocs.yml``) instead of reading their source.
griffe's inspector gives a class attribute no annotation, which left the Type column of every message's
Attributes table empty, and takes a constant's description from its value (``Timestamp.INFINITY`` got the
docstring of ``int``).  This extension gives each inspected class attribute the annotation its class holds
at run time, written with the names its module uses so that mkdocstrings links them, and a constant the
``#:`` comment above it in the class's source.
"""

from __future__ import annotations

import ast
import inspect
import re
from typing import Any

import griffe

_QUALIFIER = re.compile(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])")


def annotation_text(annotation: Any) -> str:
    """An annotation as source text without module prefixes: ``list[TupleColumn] | None``."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return _QUALIFIER.sub("", text)


class AttributeTypes(griffe.Extension):
    """Fills in an inspected class attribute's annotation (from the class's ``__annotations__``) and, for a
    constant, its ``#:`` description."""

    def on_attribute_instance(self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute,
                              agent: Any, **kwargs: Any) -> None:
        if attr.annotation is not None or not isinstance(node, griffe.ObjectNode) or node.parent is None:
            return
        owner = node.parent.obj
        if not inspect.isclass(owner):
            return
        if attr.docstring is not None and node.obj.__doc__ == type(node.obj).__doc__:
            comment = comment_doc(owner, attr.name)
            attr.docstring = griffe.Docstring(comment, parent=attr) if comment else None
        annotation = inspect.get_annotations(owner).get(attr.name)
        if annotation is None:
            return
        expression = ast.parse(annotation_text(annotation), mode="eval").body
        attr.annotation = griffe.safe_get_annotation(expression, attr.parent)  # type: ignore[arg-type]


def comment_doc(owner: type, name: str) -> str:
    """The ``#:`` comment lines right above ``name = ...`` in the body of class ``owner``, or ``""``."""
    try:
        lines = inspect.getsource(owner).splitlines()
    except (OSError, TypeError):
        return ""
    for index, line in enumerate(lines):
        if re.match(rf"\s+{re.escape(name)}\s*(:[^=]*)?=", line):
            comments: list[str] = []
            for above in reversed(lines[:index]):
                if not above.strip().startswith("#:"):
                    break
                comments.insert(0, above.strip()[2:].strip())
            return "\n".join(comments)
    return ""
