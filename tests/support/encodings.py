"""Databases in other encodings on the test servers, and a workload with non-ASCII names in each place a
String goes (table, column, origin, message prefix, GID) -- for the real-server encoding tests."""

from __future__ import annotations

PEEK = ("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '3', "
        "'publication_names', 'pub', 'messages', 'true', 'two_phase', 'on')")


def database(server, name: str, encoding: str) -> None:
    with server.connect() as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f"CREATE DATABASE {name} ENCODING '{encoding}' TEMPLATE template0 LC_COLLATE 'C' "
                         "LC_CTYPE 'C'")


def connect(server, dbname: str, client_encoding: str, **kw):
    import psycopg

    return psycopg.connect(server.dsn, dbname=dbname, client_encoding=client_encoding, autocommit=True, **kw)


def latin1_workload(server, dbname: str, slot: str) -> dict:
    """Make the changes (with an origin, a message and a prepared transaction); what the server says."""
    database(server, dbname, "LATIN1")
    with connect(server, dbname, "LATIN1") as conn:
        conn.execute('CREATE TABLE "café" (id int PRIMARY KEY, "naïve" text, prix numeric, "étiquettes" text[], '
                     "doc jsonb)")
        conn.execute('CREATE PUBLICATION pub FOR TABLE "café"')
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, true)", (slot,))
        origin = f"orígen {dbname}"  # origins belong to the cluster
        conn.execute("SELECT pg_replication_origin_create(%s)", (origin,))
        conn.execute("SELECT pg_replication_origin_session_setup(%s)", (origin,))
        conn.execute("""INSERT INTO "café" VALUES (1, 'crème brûlée', 12.50, '{été,"hiver ÿ"}', '{"clé": "à"}')""")
        conn.execute("SELECT pg_replication_origin_session_reset()")
        conn.execute("SELECT pg_logical_emit_message(true, 'préfixe', 'contenu')")
        conn.execute("BEGIN")
        conn.execute("""UPDATE "café" SET "naïve" = 'gâteau' WHERE id = 1""")
        conn.execute("PREPARE TRANSACTION 'gïd-1'")
        conn.execute("COMMIT PREPARED 'gïd-1'")
    with connect(server, dbname, "UTF8") as conn:  # what the server says, in text Python can compare
        names = conn.execute("""SELECT c.relname, array_agg(a.attname ORDER BY a.attnum) FROM pg_class c
                                JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
                                WHERE c.oid = '"café"'::regclass GROUP BY c.relname""").fetchone()
        row = conn.execute('SELECT * FROM "café"').fetchone()
        said = conn.execute("SELECT roname FROM pg_replication_origin WHERE roname LIKE %s", (f"%{dbname}",)).fetchone()
    assert names[0] == "café" and said[0] == origin  # the server's own view, independent of replwire
    return {"table": names[0], "columns": names[1], "row": row, "origin": said[0]}
