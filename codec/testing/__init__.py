"""A kit for testing replwire and consumers of pgoutput: Hypothesis strategies derived from the declarations,
the coverage-guided fuzz harness, and throw-away local PostgreSQL servers."""

__all__: list[str] = []
