"""``make demo`` in a clean clone, with Debian's own python3 and a bare environment, sets up and runs the demo.

Strategy: fetch the work tree's HEAD into a new repository in a temporary directory and run ``make demo`` there
under ``env -i``, with only the system's directories on PATH (so ``python3`` is Debian's, which is externally
managed: PEP 668 makes it refuse pip installs) and a new HOME (no pip cache or configuration) -- what CI and a
new user start from.  The Debian packages are installed already (the suite's own set-up did it), so this
makes .venv with the system's interpreter and pip-installs the dev extra from the package index: a minute or
two.  A second ``make setup`` must then find everything there and install nothing.
"""

import os
import pathlib
import re
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def make(target: str, clone: pathlib.Path, home: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["env", "-i", f"PATH={SYSTEM_PATH}", f"HOME={home}", "make", target], cwd=clone,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1200)


def test_make_demo_in_a_clean_clone_with_debians_python(tmp_path):
    clone, home = tmp_path / "clone", tmp_path / "home"
    home.mkdir()
    subprocess.run(["git", "init", "--quiet", str(clone)], check=True)
    subprocess.run(["git", "fetch", "--quiet", str(ROOT), "HEAD"], cwd=clone, check=True)
    subprocess.run(["git", "checkout", "--quiet", "FETCH_HEAD"], cwd=clone, check=True)

    demo = make("demo", clone, home)
    output = demo.stdout + demo.stderr
    capture = re.search(r"^capture file: (.+)$", demo.stdout, flags=re.M)
    if capture:
        shutil.rmtree(os.path.dirname(capture.group(1)), ignore_errors=True)
    assert demo.returncode == 0, output[-6000:]

    # .venv was made with the interpreter a bare PATH finds: Debian's
    assert "setup: creating .venv with /usr/bin/python3 " in demo.stdout, output[-6000:]
    config = (clone / ".venv" / "pyvenv.cfg").read_text()
    assert re.search(r"^home = /usr/bin$", config, flags=re.M), config
    # the demo's workload (replwire.codec.cli.demo.WORKLOAD), counted by hand: accounts gets 3 rows, one
    # UPDATE, one DELETE; events gets 4000 + 10 rows in the streamed transaction (the savepoint's 4000 are
    # rolled back) and 1 in the two-phase commit, then one TRUNCATE; the committed transactions are those
    # five, the transactional logical message's and the TRUNCATE's (the rolled-back one is never sent)
    assert re.search(r"accounts\W+3\W+1\W+1\W+0\W", demo.stdout), output[-6000:]
    assert re.search(r"events\W+4011\W+0\W+0\W+1\W", demo.stdout), output[-6000:]
    assert "7 committed transactions (1 streamed, 1 two-phase); 2 logical messages" in demo.stdout

    again = make("setup", clone, home)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "installing" not in again.stdout and "creating" not in again.stdout, again.stdout
