"""Stateful and sans-I/O: messages in order become committed transactions with typed values.

``decoder`` tracks the stream state and the relation and type caches; ``routing`` says what each message
does to the transactions open; ``outcome`` holds what is known of a committed transaction besides its
changes; ``assembler`` buffers and emits committed transactions; ``values`` loads column values by type
OID; ``jsonl`` writes changes as JSON; ``fold`` turns a table's committed changes into its current rows.
Nothing here opens a file or a connection.
"""

__all__: list[str] = []
