"""Which PostgreSQL servers speak which pgoutput protocol version.

A server speaks every protocol version from 1 up to the highest its release introduced; the message specs
say which version each message and field needs (``min_proto``, ``since``), this table which server that is.
"""

__all__ = ["PROTO_FIRST_SERVER", "highest_proto_version"]

#: The first PostgreSQL major that speaks each pgoutput protocol version.
PROTO_FIRST_SERVER: dict[int, int] = {1: 10, 2: 14, 3: 15, 4: 16}


def highest_proto_version(server_version: int) -> int:
    """The highest pgoutput protocol version a server speaks, from its ``server_version_num`` (``160004`` for
    16.4): 4 from PostgreSQL 16, 3 from 15, 2 from 14, 1 before."""
    return max((proto for proto, major in PROTO_FIRST_SERVER.items() if server_version >= major * 10000),
               default=1)
