#!/usr/bin/env bash
# `make fuzz-compiled [FUZZ_SECONDS=60]`: coverage-guided fuzzing of the compiled codec built with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer.  Exits non-zero on a finding (a sanitizer report is a
# crash for libFuzzer, saved with a reproducer under fuzz-findings/compiled/).
#
# The compiled codec is generated from this checkout and compiled into build/fuzz-compiled/, beside a copy
# of the package (the layout a wheel installs), which PYTHONPATH puts first; REPLWIRE_IMPL=c makes sure it
# is the codec in use.  Python is not built with the sanitizers, so their runtime is preloaded: one shared
# library holding ASan (with UBSan's handlers) and libFuzzer, linked from clang's runtime archives, so that
# libFuzzer also sees the C code's coverage (atheris then uses that libFuzzer instead of its own).  The
# harness is `replwire fuzz`'s: every input parsed and built by the codec in use and by the reference;
# then the typed-column reader's (replwire.codec.stream.fuzz: any bytes as the texts of a column), the JSON row
# writer's text in each client encoding it reads (replwire.codec.stream.fuzz: any bytes as UTF-8, LATIN1 or
# SQL_ASCII text), then the compiled row path's (replwire.codec.split.fuzz: any bytes as COPY-CSV rows or
# capture records).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_TO_FUZZ=${1:-60}
PY=.venv/bin/python
BUILD=build/fuzz-compiled
RUNTIME=$(clang -print-resource-dir)/lib/linux

rm -rf "$BUILD"
mkdir -p "$BUILD/replwire"
cp -r schema codec spark "$BUILD/replwire/"
find "$BUILD" \( -name '*.so' -o -name '_compiled.c' \) -delete
find "$BUILD" -name __pycache__ -prune -exec rm -rf {} +

REPLWIRE_IMPL=python PYTHONPATH=namespace "$PY" -m replwire.codec.wire.gen.c_module "$BUILD/_compiled.c" >/dev/null
suffix=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
include=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
echo "fuzz-compiled: building the compiled codec with clang -fsanitize=address,undefined,fuzzer-no-link"
clang -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all \
    -shared -fPIC -I"$include" "$BUILD/_compiled.c" -o "$BUILD/replwire/codec/wire/_compiled$suffix"
# the ASan archive without its .preinit_array object (not allowed in a shared library)
mkdir "$BUILD/asan"
(cd "$BUILD/asan" && ar x "$RUNTIME/libclang_rt.asan-x86_64.a" && rm -f asan_preinit*.o && ar rcs ../asan.a ./*.o)
clang -shared -o "$BUILD/asan_with_fuzzer.so" -Wl,--whole-archive "$BUILD/asan.a" \
    "$RUNTIME/libclang_rt.fuzzer_no_main-x86_64.a" -Wl,--no-whole-archive -lstdc++ -lpthread -ldl -lrt -lm

# PYTHONMALLOC=malloc: every Python object from malloc, so that ASan sees the bounds of each (Python's own
# allocator carves small objects out of big arenas, where a read past a bytes object's end goes unnoticed)
export PYTHONPATH=$BUILD LD_PRELOAD=$BUILD/asan_with_fuzzer.so REPLWIRE_IMPL=c PYTHONMALLOC=malloc
# Python's own allocations are never freed at exit: leaks are not findings here; a small quarantine keeps
# the process inside libFuzzer's memory limit
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:symbolize=1:quarantine_size_mb=16:malloc_context_size=8 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
"$PY" -c "
from replwire.codec.wire import fast
assert fast.IMPL == 'c' and fast._COMPILED.__file__.startswith('$PWD/$BUILD/'), fast._COMPILED
print('fuzz-compiled: fuzzing', fast._COMPILED.__file__)"
"$PY" -m replwire.codec.cli fuzz --seconds "$SECONDS_TO_FUZZ" --artifacts fuzz-findings/compiled
"$PY" -m replwire.codec.cli fuzz --target replwire.codec.stream.fuzz:fuzz_texts --corpus "$BUILD/texts-corpus" \
    --seconds "$SECONDS_TO_FUZZ" --artifacts fuzz-findings/compiled-texts
# (the JSON row writer's text starts from its own inputs as well as the module's SEEDS)
"$PY" -c "import pathlib; from replwire.codec.stream.fuzz import STRING_SEEDS
from replwire.codec.testing.fuzz import write_corpus; write_corpus(pathlib.Path('$BUILD/strings-corpus'), STRING_SEEDS)"
"$PY" -m replwire.codec.cli fuzz --target replwire.codec.stream.fuzz:fuzz_strings --corpus "$BUILD/strings-corpus" \
    --seconds "$SECONDS_TO_FUZZ" --artifacts fuzz-findings/compiled-strings
exec "$PY" -m replwire.codec.cli fuzz --target replwire.codec.split.fuzz:fuzz_rows --corpus "$BUILD/rows-corpus" \
    --seconds "$SECONDS_TO_FUZZ" --artifacts fuzz-findings/compiled-rows
