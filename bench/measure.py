"""Timing and memory measurement for the benchmark: best-of-rounds wall time, peak RSS per run.

Strategy: every run is one call of a codec's loop over a list of messages, timed with
``time.perf_counter``; codecs are interleaved round by round and each keeps its fastest round, so a busy
neighbour on a shared machine slows a round, not a codec.  Peak RSS is the kernel's high-water mark
(``VmHWM``), reset before each run through ``/proc/self/clear_refs`` so that it belongs to that run; where
that is not possible (not Linux), the process-wide ``ru_maxrss`` is reported instead.
"""

from __future__ import annotations

import gc
import os
import platform
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

_HWM = re.compile(rb"VmHWM:\s+(\d+) kB")
_RSS = re.compile(rb"VmRSS:\s+(\d+) kB")


def _status(pattern: re.Pattern) -> int | None:
    try:
        with open("/proc/self/status", "rb") as status:
            match = pattern.search(status.read())
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def reset_peak() -> bool:
    """Reset the peak RSS of this process to its current RSS; False when the platform cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return False
    return True


def peak_rss() -> int:
    """Peak resident set size in bytes: since the last :func:`reset_peak`, or of the whole process."""
    hwm = _status(_HWM)
    if hwm is not None:
        return hwm
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def current_rss() -> int | None:
    return _status(_RSS)


def timed(run: Callable[[], Any]) -> tuple[float, int, int]:
    """Run once: (seconds, peak RSS in bytes during the run, RSS just before it)."""
    gc.collect()
    reset_peak()
    before = current_rss() or 0
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    return seconds, peak_rss(), before


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            models = [line.split(":", 1)[1].strip() for line in info if line.startswith("model name")]
        if models:
            cpu = models[0]
    except OSError:
        pass
    memory = None
    try:
        with open("/proc/meminfo") as info:
            memory = int(info.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "os": _os_name(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_bytes": memory,
        "load_average_at_start": load,
        "replwire_commit": _git_commit(),
    }


def _os_name() -> str:
    """The distribution's own name (``/etc/os-release``) where there is one, else the system and release."""
    try:
        return platform.freedesktop_os_release()["PRETTY_NAME"]
    except (OSError, KeyError):
        return f"{platform.system()} {platform.release()}".strip()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, timeout=10,
                               cwd=os.path.dirname(os.path.abspath(__file__)))
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode:
        return None
    return out.stdout.strip() + ("+uncommitted" if dirty.stdout.strip() else "")
