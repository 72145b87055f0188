"""The message and record classes: slotted dataclasses that pickle, copy and compare like plain ones.

Spark ships Relation and Type messages and Decoder state between processes by pickling, so every message
kind (from every valid golden vector) is pickled with every protocol, copied, replaced and compared.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from replwire.codec import Insert, Relation, RelationColumn, TupleColumn, messages
from tests.support.vectors import VALID

KINDS = {}
for _vector in VALID:
    KINDS.setdefault(type(_vector.parse()).__name__, _vector)


def test_every_message_kind_has_a_vector():
    assert set(KINDS) == {cls.__name__ for cls in messages.WireMessage.__subclasses__()}


@pytest.mark.parametrize("vector", KINDS.values(), ids=list(KINDS))
def test_message_pickles_copies_and_replaces(vector):
    message = vector.parse()
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        again = pickle.loads(pickle.dumps(message, protocol=protocol))
        assert again == message and repr(again) == repr(message) and type(again) is type(message)
    assert copy.copy(message) == message and copy.deepcopy(message) == message
    assert dataclasses.replace(message) == message
    records = [item for f in dataclasses.fields(message) if isinstance(getattr(message, f.name), list)
               for item in getattr(message, f.name) if dataclasses.is_dataclass(item)]
    for obj in (message, *records):
        assert not hasattr(obj, "__dict__")  # slotted, down to the records


def test_records_pickle_and_keep_their_defaults():
    column = RelationColumn(flags=1, name="id", type_id=23, type_modifier=-1)
    assert pickle.loads(pickle.dumps(column)) == column and column.is_key
    assert pickle.loads(pickle.dumps(TupleColumn.null())) == TupleColumn(kind="n", data=None)
    assert Insert(relation_id=1, new=[]).xid is None  # optional fields default to None, must-be-zero to 0
    assert Relation(relation_id=1, namespace="s", name="t", replica_identity="d", columns=[]).xid is None


def test_objects_pickled_as_a_state_dict_still_load():
    """The state is ``{field: value}``: what the classes pickled before they had slots."""
    message = Insert(relation_id=7, new=[TupleColumn.text("x")])
    restored = object.__new__(Insert)
    restored.__setstate__({"xid": None, "relation_id": 7, "new": [TupleColumn.text("x")]})
    assert restored == message
    assert message.__reduce_ex__(2)[2] == {"xid": None, "relation_id": 7, "new": [TupleColumn.text("x")]}
