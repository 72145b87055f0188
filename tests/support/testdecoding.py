"""What the server's own ``test_decoding`` plugin says a stream of changes holds, to check replwire's
decoding against: its records grouped into committed transactions, compared value by value, and binary
(``b``) values checked by the server's send functions."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Binary:
    type_id: int
    type_modifier: int
    data: bytes



def td_columns(cols):
    return tuple((c.name, c.value) for c in cols)


def td_transactions(records, *, leaf_to_root: dict[str, str]):
    committed, loose, prepared = {}, [], {}
    current, current_xid = None, None
    for rec in records:
        kind = rec.kind
        if kind == "BEGIN":
            current, current_xid = [], rec.xid
        elif kind == "COMMIT":
            committed[current_xid] = current
            current = None
        elif kind == "PREPARE":
            prepared[rec.gid] = (current_xid, current)
            current = None
        elif kind == "COMMIT PREPARED":
            xid, changes = prepared.pop(rec.gid)
            committed[xid] = changes
        elif kind == "ROLLBACK PREPARED":
            prepared.pop(rec.gid, None)
        elif kind == "MESSAGE":
            change = ("MESSAGE", rec.prefix, rec.content, rec.transactional)
            if not rec.transactional:
                loose.append(change)
            elif current is None:  # with skip-empty-xacts a message-only transaction prints no BEGIN/COMMIT
                committed.setdefault(rec.row_xid, []).append(change)
            else:
                current.append(change)
        elif kind == "TRUNCATE":
            names = tuple(sorted(leaf_to_root.get(t, t) for t in rec.tables))
            current.append(("TRUNCATE", names, "cascade" in rec.flags, "restart_seqs" in rec.flags))
        elif kind in ("INSERT", "UPDATE", "DELETE"):
            table = leaf_to_root.get(rec.table, rec.table)
            old = td_columns(rec.old) if rec.old is not None else None
            new = td_columns(rec.new) if rec.new is not None else None
            current.append((kind, table, old, new))
        else:
            raise AssertionError(f"unexpected test_decoding record {rec.kind}")
    return committed, loose


def compare_values(pg_change, td_change, pending):
    """Assert two changes are equal; binary values are collected in ``pending`` for the server to check."""
    assert pg_change[0] == td_change[0] and pg_change[1] == td_change[1], (pg_change, td_change)
    if pg_change[0] in ("TRUNCATE", "MESSAGE"):
        assert pg_change == td_change
        return
    for pg_cols, td_cols in zip(pg_change[2:], td_change[2:]):
        if pg_cols is None or td_cols is None:
            assert pg_cols is None and td_cols is None, (pg_change, td_change)
            continue
        td_by_name = dict(td_cols)
        assert [n for n, _ in pg_cols] == [n for n, _ in td_cols if n in {p for p, _ in pg_cols}]
        assert {n for n, _ in pg_cols} <= set(td_by_name), (pg_cols, td_cols)
        for name, value in pg_cols:
            expected = td_by_name[name]
            if isinstance(value, Binary):
                assert isinstance(expected, str), (name, value, expected)
                pending.append(((value.type_id, value.type_modifier), expected, value.data))
            else:
                assert value == expected, (pg_change[1], name, value, expected)


def check_binary_values(conn, pending) -> int:
    """The server's own send function, applied to test_decoding's text, gives exactly the 'b' bytes."""
    by_type: dict[tuple[int, int], list[tuple[str, bytes]]] = {}
    for type_key, text, data in pending:
        by_type.setdefault(type_key, []).append((text, data))
    for (type_id, type_modifier), pairs in by_type.items():
        send, sql_type = conn.execute(
            "SELECT typsend::regproc::text, format_type(oid, %s) FROM pg_type WHERE oid = %s",
            (type_modifier, type_id)).fetchone()
        texts = [text for text, _ in pairs]
        got = conn.execute(f"SELECT {send}(v::{sql_type}) "
                           "FROM unnest(%s::text[]) WITH ORDINALITY AS u(v, i) ORDER BY i",
                           (texts,)).fetchall()
        for (text, data), (sent,) in zip(pairs, got):
            assert bytes(sent) == data, (sql_type, text)
    return len(pending)


def leaf_to_root_map(conn) -> dict[str, str]:
    rows = conn.execute("""
        SELECT format('%s.%s', n.nspname, c.relname), format('%s.%s', rn.nspname, r.relname)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_class r ON r.oid = pg_partition_root(c.oid) JOIN pg_namespace rn ON rn.oid = r.relnamespace
        WHERE c.relispartition""").fetchall()
    return dict(rows)


def published_changes(conn, publication_names: str) -> set[tuple[str, str]]:
    """The ``(operation, table)`` pairs the server publishes for ``publication_names`` (a capture's
    ``publication_names`` option), from the catalogs: what test_decoding's records are filtered by, so that a
    kind of change replwire never produced on a table is still expected of it."""
    names = [name.strip().strip('"').replace('""', '"') for name in publication_names.split(",")]
    rows = conn.execute("""
        SELECT format('%%s.%%s', t.schemaname, t.tablename), p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate
        FROM pg_publication p JOIN pg_publication_tables t ON t.pubname = p.pubname
        WHERE p.pubname = ANY(%s)""", (names,)).fetchall()
    published = set()
    for table, *flags in rows:
        published |= {(op, table) for op, on in zip(("INSERT", "UPDATE", "DELETE", "TRUNCATE"), flags) if on}
    assert published, f"nothing published for {publication_names}"
    return published


def published_only(change, published: set[tuple[str, str]]):
    """``change`` (test_decoding's) as the server publishes it: None for a table or operation not published,
    a TRUNCATE narrowed to its published tables."""
    if change[0] == "TRUNCATE":
        names = tuple(name for name in change[1] if ("TRUNCATE", name) in published)
        return (change[0], names, *change[2:]) if names else None
    return change if (change[0], change[1]) in published else None
