"""The only modules that open files or connections: capture files and COPY-CSV, checking and creating a
replication slot, the connection and set-up of a capture, resuming a capture file, live capture (over the
replication protocol or the SQL functions), and the initial snapshot."""

__all__: list[str] = []
