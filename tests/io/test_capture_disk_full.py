"""A full disk under the capture file's writer, injected at the raw-write seam: the file object the writer
opens writes at most ``room`` more bytes (a short write first, as the OS does when space runs out, then
ENOSPC), and space can come back at any moment.  What reached the disk is then read back by the reader,
an independent judge of damage."""

from __future__ import annotations

import errno
import io
import os

import pytest

from replwire.codec.io import capture_file
from replwire.codec.io.capture_file import CaptureHeader, CaptureWriter, read_capture

HEADER = CaptureHeader(proto_version=1, server_version=160004, options={"publication_names": "p"})


class Disk:
    """How many more bytes fit: ``None`` is unlimited."""

    def __init__(self) -> None:
        self.room: int | None = None
        self.refused = 0


class FullDiskFile(io.RawIOBase):
    """A real file whose writes stop where the disk's room ends."""

    def __init__(self, path: str, mode: str, disk: Disk) -> None:
        self.raw = io.FileIO(path, mode.replace("b", ""))
        self.disk = disk

    def write(self, data) -> int:
        data = memoryview(data)
        if self.disk.room is not None:
            if self.disk.room == 0:
                self.disk.refused += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data = data[:self.disk.room]
        written = self.raw.write(data)
        if self.disk.room is not None:
            self.disk.room -= written
        return written

    def readable(self) -> bool:
        return self.raw.readable()

    def readinto(self, buffer) -> int:
        return self.raw.readinto(buffer)

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def truncate(self, size: int | None = None) -> int:
        return self.raw.truncate(size)

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        self.raw.close()
        super().close()


@pytest.fixture
def disk(monkeypatch):
    """Every file the capture file module opens for writing goes through a :class:`FullDiskFile`, buffered
    as asked."""
    disk = Disk()
    real_open = open

    def fake_open(path, mode="r", buffering=-1, *args, **kwargs):
        if "w" not in mode and "+" not in mode:
            return real_open(path, mode, buffering, *args, **kwargs)
        raw = FullDiskFile(os.fspath(path), mode, disk)
        if buffering == 0:
            return raw
        return io.BufferedRandom(raw) if "+" in mode else io.BufferedWriter(raw)

    monkeypatch.setattr(capture_file, "open", fake_open, raising=False)
    return disk


def record(i: int) -> tuple[int, int, bytes]:
    return (0x1000 + i, 700, b"M" + i.to_bytes(4, "big") + bytes(2000))


def read_back(path) -> tuple[list[int], object]:
    """The LSNs of the records the file holds, and where reading stopped early (``None``: nowhere)."""
    with read_capture(path) as reader:
        reading = reader.records(raw=True)
        lsns = [lsn for _, lsn, _, _ in reading]
        return lsns, reading.tail


def test_a_failed_batch_is_cut_off_and_never_written_again_after_its_partial_bytes(tmp_path, disk):
    path = tmp_path / "full.rwcap"
    writer = CaptureWriter(path, HEADER)
    writer.extend([record(i) for i in range(10)])
    durable = writer.sync()
    # the next batch (over a MiB) fits only partly: a short write, then ENOSPC
    disk.room = 5000
    with pytest.raises(OSError) as failed:
        writer.extend([record(i) for i in range(10, 700)])
        writer.sync()
    assert failed.value.errno == errno.ENOSPC
    disk.room = None  # space comes back before anything is tried again
    retried = []
    for retry in (writer.sync, lambda: writer.extend([record(700)]), writer.close):  # what a clean-up may do
        try:
            retry()
        except OSError as error:
            retried.append(error.errno)
    # the file ends with its last durable record, and nothing is damaged in it
    lsns, tail = read_back(path)
    assert tail is None, f"the file is damaged: {tail}"
    assert lsns == [0x1000 + i for i in range(10)] and os.path.getsize(path) == durable
    assert retried == [errno.ENOSPC, errno.ENOSPC]  # the broken writer wrote nothing more; closing it is quiet
    # so it can be continued, where a later capture resumes it
    with CaptureWriter(path, HEADER) as resumed:
        assert resumed.recovered is None
        resumed.extend([record(i) for i in range(10, 20)])
    assert read_back(path) == ([0x1000 + i for i in range(20)], None)


def test_a_failed_fsync_cuts_back_to_the_last_durable_record(tmp_path, disk):
    path = tmp_path / "sync.rwcap"
    writer = CaptureWriter(path, HEADER)
    writer.extend([record(i) for i in range(3)])
    durable = writer.sync()
    writer.extend([record(i) for i in range(3, 6)])  # gathered; written by the next sync
    disk.room = 3000  # the sync's write is cut short
    with pytest.raises(OSError):
        writer.sync()
    disk.room = None
    writer.close()
    assert os.path.getsize(path) == durable
    assert read_back(path) == ([0x1000 + i for i in range(3)], None)


def test_a_new_file_whose_header_does_not_fit_is_not_left_behind(tmp_path, disk):
    path = tmp_path / "nospace.rwcap"
    disk.room = 10
    with pytest.raises(OSError):
        CaptureWriter(path, HEADER)
    assert not path.exists()


class InterruptingFile(FullDiskFile):
    """A write that is interrupted (Ctrl-C) once, after a short write, when the disk's room runs out."""

    def write(self, data) -> int:
        if self.disk.room == 0:
            self.disk.room = None
            raise KeyboardInterrupt
        return super().write(data)


def test_an_interrupted_write_is_taken_back_and_written_whole_again(tmp_path, disk, monkeypatch):
    path = tmp_path / "interrupted.rwcap"
    real_open = open

    def interrupting_open(name, mode="r", buffering=-1, *args, **kwargs):
        if "w" not in mode and "+" not in mode:
            return real_open(name, mode, buffering, *args, **kwargs)
        return InterruptingFile(os.fspath(name), mode, disk)

    monkeypatch.setattr(capture_file, "open", interrupting_open, raising=False)
    writer = CaptureWriter(path, HEADER)
    writer.extend([record(i) for i in range(10)])
    writer.sync()
    disk.room = 5000
    with pytest.raises(KeyboardInterrupt):
        writer.extend([record(i) for i in range(10, 700)])  # over a MiB: written as it is appended
    writer.close()  # what a clean-up does: sync, and close
    assert read_back(path) == ([0x1000 + i for i in range(700)], None)
