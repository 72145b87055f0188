"""The only modules that open files or connections: capture files and COPY-CSV, and live capture."""
