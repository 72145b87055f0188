"""The only modules that open files or connections: capture files and COPY-CSV, checking and creating a
replication slot, and live capture."""
