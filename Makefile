# Every target sets the checkout up first (scripts/setup.sh: the Debian packages that are missing, then
# .venv with replwire and its dev extra; quick when all is there), then runs in .venv.
#
#   make demo    replwire demo: a PostgreSQL 18 of its own, a workload, a live capture, what it decodes to
#   make test    ruff, mypy and the whole test suite (on the compiled codec), then the codec's own tests
#                again on the pure-Python codec (REPLWIRE_IMPL=python)
#   make docs    the documentation site, built strictly into build/site/
#   make fuzz    a minute of coverage-guided fuzzing of the decoder and encoder, then 30 s of serve's
#                protocol core
#   make fuzz-compiled  a minute each of the compiled codec, its typed-column reader, its JSON row writer's
#                text in each client encoding and decode's compiled row path, built with clang's ASan and UBSan

VENV := $(CURDIR)/.venv
# .venv activated: its bin/ first on PATH, for the commands below and whatever they start (Spark's Python
# workers, for one, run the `python3` found there)
IN_VENV := PATH="$(VENV)/bin:$$PATH" VIRTUAL_ENV="$(VENV)"

# what runs again on the pure-Python codec: the codec's own tests (vectors, real-server captures in every
# context, errors, properties, fuzz invariants), the stream layer's and the split decoding's (the Python
# row path among them) and decode's output: about three minutes (3,853 tests in 191 s on two cores); the
# rest of the suite reaches the codec through these, and
# tests/wire/test_compiled.py compares the two codecs on that input: valid input gives the same messages
# and bytes from C as from Python, invalid input is declined by C's checks (the errors themselves are
# Python's, which C forwards to), and other encodings never reach C
PYTHON_CODEC_TESTS := tests/wire tests/stream tests/split tests/test_messages.py tests/test_decode_output.py

.PHONY: setup demo test docs fuzz fuzz-compiled

setup:
	bash scripts/setup.sh

demo: setup
	$(IN_VENV) replwire demo

test: setup
	$(IN_VENV) ruff check codec schema spark tests bench docs/hooks scripts setup.py
	$(IN_VENV) python -m mypy
	$(IN_VENV) python -m pytest
	$(IN_VENV) REPLWIRE_IMPL=python python -m pytest -q $(PYTHON_CODEC_TESTS)

docs: setup
	$(IN_VENV) mkdocs build --strict --site-dir build/site

fuzz: setup
	$(IN_VENV) replwire fuzz --seconds 60
	$(IN_VENV) replwire fuzz --target replwire.codec.serve.fuzz:fuzz_session --corpus build/fuzz-serve-corpus \
		--artifacts fuzz-findings/serve --seconds 30

fuzz-compiled:
	bash scripts/setup.sh --sanitizers
	$(IN_VENV) bash scripts/fuzz-compiled.sh 60
