"""LSN and Timestamp: text forms as PostgreSQL writes them, exact wire integers."""

from datetime import datetime, timedelta, timezone

import pytest

from replwire.codec import LSN, Timestamp


@pytest.mark.parametrize("text, value", [
    ("0/0", 0),
    ("0/16B3748", 0x16B3748),
    ("16/B374D848", 0x16_B374D848),
    ("FFFFFFFF/FFFFFFFF", 2**64 - 1),
])
def test_lsn_text_round_trip(text, value):
    assert LSN(text) == value
    assert str(LSN(value)) == text


def test_lsn_accepts_lower_case_and_zero_padding():
    assert LSN("0/016b3748") == 0x16B3748
    assert LSN("00000001/00000000") == 2**32


@pytest.mark.parametrize("bad", ["", "0", "0/", "/1", "G/1", "123456789/0", "0/1/2", "0x1/0"])
def test_lsn_rejects_bad_text(bad):
    with pytest.raises(ValueError):
        LSN(bad)


def test_lsn_range():
    with pytest.raises(ValueError):
        LSN(-1)
    with pytest.raises(ValueError):
        LSN(2**64)
    with pytest.raises(TypeError):
        LSN(1.5)


def test_timestamp_epoch_and_unix_offset():
    # PostgreSQL's epoch is 2000-01-01 UTC, 946684800 s after the Unix epoch.
    assert Timestamp(0).to_datetime() == datetime(2000, 1, 1, tzinfo=timezone.utc)
    assert Timestamp(0).to_datetime().timestamp() == 946_684_800
    assert Timestamp(-1).to_datetime() == datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)


def test_timestamp_from_aware_datetime():
    paris = timezone(timedelta(hours=2))
    t = Timestamp(datetime(2000, 1, 1, 2, 0, 0, 1, tzinfo=paris))
    assert t == 1
    with pytest.raises(ValueError, match="naive"):
        Timestamp(datetime(2000, 1, 1))


def test_timestamp_infinities_keep_their_wire_value():
    assert Timestamp("infinity") == 2**63 - 1
    assert Timestamp("-infinity") == -(2**63)
    assert str(Timestamp(2**63 - 1)) == "infinity"
    assert Timestamp(-(2**63)).is_infinite
    with pytest.raises(ValueError, match="no datetime"):
        Timestamp("infinity").to_datetime()


def test_timestamp_outside_datetime_range_is_a_clear_error():
    big = Timestamp(2**62)
    with pytest.raises(ValueError, match="outside datetime's range"):
        big.to_datetime()
    assert repr(big) == f"Timestamp({2**62})"


def test_timestamp_range():
    with pytest.raises(ValueError):
        Timestamp(2**63)
