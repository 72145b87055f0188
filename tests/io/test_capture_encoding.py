"""Capture files record the connection's client encoding in their header (issue 17, item 7)."""

from __future__ import annotations

import pytest

from replwire.codec.io.capture_file import CaptureFileError, CaptureHeader, CaptureWriter, encode_header, read_capture
from replwire.codec.split import open_inputs
from replwire.schema import capture as layout


def test_header_records_the_client_encoding(tmp_path):
    header = CaptureHeader(proto_version=2, options={"publication_names": "p"}, client_encoding="LATIN1")
    with CaptureWriter(tmp_path / "a.rwcap", header):
        pass
    with read_capture(tmp_path / "a.rwcap") as reader:
        assert reader.header == header
    assert open_inputs([tmp_path / "a.rwcap"])[0].encoding == "iso8859-1"
    # on disk it is one more name/value option after the pgoutput ones (count 2), so the format is unchanged
    assert b"\x00\x02publication_names\x00p\x00client_encoding\x00LATIN1\x00" in (tmp_path / "a.rwcap").read_bytes()


def test_utf8_is_not_written_and_a_header_without_it_is_utf8(tmp_path):
    with CaptureWriter(tmp_path / "u.rwcap", CaptureHeader(proto_version=1, client_encoding="UTF8")):
        pass
    assert b"client_encoding" not in (tmp_path / "u.rwcap").read_bytes()
    path = tmp_path / "old.rwcap"
    path.write_bytes(layout.HEADER.build({"header": {"magic": None, "format_version": 1, "server_version": 0,
                                                     "proto_version": 1, "options": []}}))
    with read_capture(path) as reader:
        assert (reader.header.client_encoding, reader.header.options) == ("UTF8", {})


def test_appending_in_another_encoding_is_refused(tmp_path):
    with CaptureWriter(tmp_path / "a.rwcap", CaptureHeader(proto_version=1, client_encoding="LATIN1")):
        pass
    with pytest.raises(CaptureFileError, match="cannot append"):
        CaptureWriter(tmp_path / "a.rwcap", CaptureHeader(proto_version=1, client_encoding="UTF8"))


def test_client_encoding_is_not_a_pgoutput_option():
    with pytest.raises(ValueError, match="not a pgoutput option"):
        encode_header(CaptureHeader(proto_version=1, options={"client_encoding": "LATIN1"}))


def test_inputs_must_agree_on_the_encoding(tmp_path):
    for name, encoding in (("a", "LATIN1"), ("b", "UTF8")):
        with CaptureWriter(tmp_path / f"{name}.rwcap", CaptureHeader(proto_version=1, client_encoding=encoding)):
            pass
    with pytest.raises(CaptureFileError, match="different client encodings"):
        open_inputs([tmp_path / "a.rwcap", tmp_path / "b.rwcap"])
    with pytest.raises(CaptureFileError, match="but UTF8 was given"):
        open_inputs([tmp_path / "a.rwcap"], encoding="UTF8")
