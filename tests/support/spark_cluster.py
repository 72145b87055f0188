"""A real Spark standalone cluster on loopback for the tests and the benchmark: a master and two workers,
each its own JVM, whose Python (``python3`` on PATH, the executors' and the driver's planner's) cannot import
replwire, so that the jobs must ship it (:func:`replwire.spark.shipping.ship`)."""

from __future__ import annotations

import json
import os
import pathlib
import site
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def python_without_replwire(directory: pathlib.Path) -> pathlib.Path:
    """A venv of this interpreter's base Python that sees this environment's packages (pyspark, pyarrow,
    construct, ...) but not replwire: the site directories are added by a .pth of plain paths, whose own
    .pth files (replwire's editable install among them) are then not run."""
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip",
                    str(directory)], check=True, timeout=120)
    python = directory / "bin" / "python3"
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(target, "packages.pth"), "w", encoding="utf-8") as handle:
        handle.write("".join(f"{p}\n" for p in site.getsitepackages() if os.path.isdir(p)))
    return python


@contextmanager
def standalone_cluster(root: pathlib.Path, base_env: dict[str, str], workers: int = 2, cores: int = 1,
                       memory: str = "1g") -> Iterator[tuple[str, dict[str, str], pathlib.Path]]:
    """The cluster, its files under ``root`` (the workers' executors' logs in ``worker-<n>/``); stopped on
    exit.  Yields the master's URL, the environment (``base_env`` and the cluster's) to run a driver in, and
    the Python without replwire that it puts first on PATH."""
    import pyspark

    python = python_without_replwire(root / "venv")
    if subprocess.run([str(python), "-c", "import replwire"], capture_output=True).returncode == 0:
        raise RuntimeError("the cluster's Python imports replwire")
    subprocess.run([str(python), "-c", "import pyspark, pyarrow, construct"], check=True, timeout=120)
    home = os.path.dirname(pyspark.__file__)
    port, web = free_port(), free_port()
    env = {**base_env, "PATH": f"{python.parent}:/usr/bin:/bin", "SPARK_HOME": home, "SPARK_DAEMON_MEMORY": "256m"}
    spark_class = os.path.join(home, "bin", "spark-class")
    processes = []
    try:
        processes.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(web)], env=env, stdout=subprocess.DEVNULL, stderr=open(root / "master.log", "w")))
        for n in range(workers):
            work = root / f"worker-{n}"
            work.mkdir()
            processes.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
                 "127.0.0.1", "--cores", str(cores), "--memory", memory, "--work-dir", str(work), "--webui-port",
                 "0"], env=env, stdout=subprocess.DEVNULL, stderr=open(root / f"worker-{n}.log", "w")))
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{web}/json", timeout=5) as response:
                    state = json.load(response)
                if sum(w["state"] == "ALIVE" for w in state["workers"]) == workers:
                    break
            except (OSError, ValueError):  # (not listening yet, or its first answers empty while it starts)
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not register with the master")
            if any(p.poll() is not None for p in processes):
                raise RuntimeError((root / "master.log").read_text()[-3000:])
            time.sleep(1)
        yield f"spark://127.0.0.1:{port}", env, python
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
