# Every target sets the checkout up first (scripts/setup.sh: the Debian packages that are missing, then
# .venv with replwire and its dev extra; quick when all is there), then runs in .venv.
#
#   make demo    replwire demo: a PostgreSQL 18 of its own, a workload, a live capture, what it decodes to
#   make test    ruff, mypy and the whole test suite
#   make docs    the documentation site, built strictly into build/site/
#   make fuzz    a minute of coverage-guided fuzzing of the decoder and encoder, then 30 s of serve's
#                protocol core

VENV := $(CURDIR)/.venv
# .venv activated: its bin/ first on PATH, for the commands below and whatever they start (Spark's Python
# workers, for one, run the `python3` found there)
IN_VENV := PATH="$(VENV)/bin:$$PATH" VIRTUAL_ENV="$(VENV)"

.PHONY: setup demo test docs fuzz

setup:
	bash scripts/setup.sh

demo: setup
	$(IN_VENV) replwire demo

test: setup
	$(IN_VENV) ruff check codec schema spark tests bench docs/hooks scripts
	$(IN_VENV) python -m mypy
	$(IN_VENV) python -m pytest

docs: setup
	$(IN_VENV) mkdocs build --strict --site-dir build/site

fuzz: setup
	$(IN_VENV) replwire fuzz --seconds 60
	$(IN_VENV) python -m replwire.codec.serve.fuzz build/fuzz-serve-corpus
	$(IN_VENV) replwire fuzz --target replwire.codec.serve.fuzz:fuzz_session --corpus build/fuzz-serve-corpus \
		--artifacts fuzz-findings/serve --seconds 30
