"""keep_freed_memory: blocks of the sizes a capture writes and frees are reused, not faulted in anew each
time (page faults counted by the kernel, in a process of their own), and the capture command sets it."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from replwire.codec import malloc_tuning

GLIBC = sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "gnu_get_libc_version")

#: A process that makes and frees, 400 times over, eight blocks of 256 KiB at once, as a capture's records
#: (after one such block freed, glibc serves them from its heap and gives the heap's top back to the system
#: once they are freed), and prints the page faults of those rounds (the kernel's count of minor faults).
_CHURN = """
import resource, sys
from replwire.codec.malloc_tuning import keep_freed_memory
if sys.argv[1] == "tuned":
    assert keep_freed_memory()
block = bytes(256 << 10); del block
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(400):
    blocks = [bytes(256 << 10) for _ in range(8)]
    del blocks
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(how: str) -> int:
    done = subprocess.run([sys.executable, "-c", _CHURN, how], capture_output=True, text=True, timeout=120, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt: another C library is left as it is")
def test_freed_blocks_are_reused_once_tuned():
    # 3,200 blocks of 256 KiB: made anew, up to 204,800 pages touched; reused, hardly any
    tuned, untouched = _faults("tuned"), _faults("untouched")
    assert tuned < 2_000, tuned
    assert untouched > 20_000, untouched  # (the churn does fault pages in with glibc's own thresholds)


def test_it_says_whether_it_did():
    assert malloc_tuning.keep_freed_memory() is GLIBC


def test_the_capture_command_keeps_freed_memory():
    from replwire.codec.cli import capture

    assert capture.keep_freed_memory is malloc_tuning.keep_freed_memory
