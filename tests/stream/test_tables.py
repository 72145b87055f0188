"""The table filter of ``replwire decode --table/--exclude-table`` (and the Spark jobs): its glob rule."""

from __future__ import annotations

import pytest

from replwire.codec.stream.tables import TableFilter


@pytest.mark.parametrize("include, exclude, name, kept", [
    ((), (), ("public", "t"), True),
    (("public.*",), (), ("public", "orders"), True),
    (("public.*",), (), ("sales", "orders"), False),
    (("*.orders",), (), ("sales", "orders"), True),
    (("*.orders",), (), ("sales", "orders_2"), False),
    (("orders",), (), ("sales", "orders"), True),  # no dot: any schema
    (("orders",), (), ("sales", "x"), False),
    (("*",), (), ("a", "b"), True),
    (("public*",), (), ("public", "t"), False),  # no dot: a table name, not the schema
    (("p*.o?ders",), (), ("public", "orders"), True),
    (("*.t[0-9]",), (), ("s", "t7"), True),
    (("*.t[!0-9]",), (), ("s", "t7"), False),
    (("Public.*",), (), ("public", "t"), False),  # case-sensitive: names as stored
    (('"my.schema".t',), (), ("my.schema", "t"), True),  # a quoted dot is part of the name
    (('"my.schema".t',), (), ("my", "schema.t"), False),
    (('s."t*"',), (), ("s", "t*"), True),  # quoted: wildcards literal
    (('s."t*"',), (), ("s", "tx"), False),
    (('s."a""b"',), (), ("s", 'a"b'), True),
    (("*.*",), (), ("s", "a.b"), True),
    (("s.*",), (), ("s", "a.b"), True),  # a dot in the table part: the name holds it
    ((), ("*.items",), ("s", "items"), False),
    ((), ("*.items",), ("s", "orders"), True),
    (("s.*",), ("s.items",), ("s", "items"), False),  # exclude wins
    (("s.*",), ("s.items",), ("s", "orders"), True),
    (("a.*", "b.*"), (), ("b", "x"), True),
    ((), (), ("pg_catalog", "x"), True),
])
def test_the_rule(include, exclude, name, kept):
    assert TableFilter(include, exclude).matches(*name) is kept


def test_an_empty_filter_keeps_everything_and_is_false():
    assert not TableFilter() and TableFilter(["a.b"]) and TableFilter(exclude=["a.b"])


@pytest.mark.parametrize("pattern", ['"open', "s.", ".t", ""])
def test_patterns_that_do_not_parse(pattern):
    with pytest.raises(ValueError, match="table pattern"):
        TableFilter([pattern])
