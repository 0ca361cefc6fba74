"""The shell commands' input parsing and output formats, without a broker."""

from __future__ import annotations

import argparse
import datetime
import io
import json
import threading

import pytest

from eosclient._cli import consume, produce
from eosclient._cli.common import EXIT_FAILED, EXIT_UNSUPPORTED, EXIT_USAGE, guarded, print_rows
from eosclient._core.decode import ConsumerRecord
from eosclient.errors import FatalError, KafkaTimeoutError, UnsupportedVersionError


def test_lines_become_records_with_keys() -> None:
    stream = io.BytesIO(b"k1:v1\r\nk2:v:2\nk3:\n")
    assert list(produce._records(stream, False, b":")) == [
        (b"k1", b"v1"), (b"k2", b"v:2"), (b"k3", b"")]


def test_a_line_without_the_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="no key separator"):
        list(produce._records(io.BytesIO(b"novalue\n"), False, b":"))


def test_whole_file_is_one_record() -> None:
    data = b"line 1\nline 2\n\xff"
    assert list(produce._records(io.BytesIO(data), True, b":")) == [(None, data)]


def test_json_lines_carry_metadata_and_mark_binary() -> None:
    record = ConsumerRecord("t", 1, 7, None, b"\xff\x00", (("h", b"v"), ("n", None)), 123)
    out = io.BytesIO()
    consume._write(out, record, argparse.Namespace(format="json", key_separator=None))
    assert json.loads(out.getvalue()) == {
        "topic": "t", "partition": 1, "offset": 7, "timestamp_ms": 123, "key": None,
        "value": {"base64": "/wA="}, "headers": [["h", "v"], ["n", None]]}
    assert out.getvalue().endswith(b"\n") and out.getvalue().count(b"\n") == 1


def test_raw_lines_with_a_key_separator() -> None:
    out = io.BytesIO()
    args = argparse.Namespace(format="raw", key_separator="=")
    consume._write(out, ConsumerRecord("t", 0, 0, b"k", b"v", (), 0), args)
    consume._write(out, ConsumerRecord("t", 0, 1, None, None, (), 0), args)
    assert out.getvalue() == b"k=v\n=\n"


def test_timestamps_in_milliseconds_or_iso_8601() -> None:
    assert consume._timestamp_ms("1700000000000") == 1_700_000_000_000
    assert consume._timestamp_ms("2023-11-14T22:13:20+00:00") == 1_700_000_000_000
    local = datetime.datetime(2023, 11, 14, 22, 13, 20).astimezone()
    assert consume._timestamp_ms("2023-11-14T22:13:20") == int(local.timestamp() * 1000)
    with pytest.raises(ValueError, match="ISO 8601"):
        consume._timestamp_ms("yesterday")


def test_tables_align_and_json_is_one_object_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"topic": "a", "partition": 0, "isr": [1, 2]},
            {"topic": "longer", "partition": 10, "isr": []}]
    print_rows(rows, ("topic", "partition", "isr"), "table")
    assert capsys.readouterr().out.splitlines() == [
        "TOPIC   PARTITION  ISR", "a       0          1,2", "longer  10         -"]
    print_rows(rows, ("topic", "partition", "isr"), "json")
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == rows


@pytest.mark.parametrize(("error", "status"), [
    (UnsupportedVersionError("LIST_TRANSACTIONS: no common version"), EXIT_UNSUPPORTED),
    (FatalError("TOPIC_ALREADY_EXISTS"), EXIT_FAILED),
    (KafkaTimeoutError("Metadata did not finish in time"), EXIT_FAILED),
    (ValueError("bad option"), EXIT_USAGE),
])
def test_errors_map_to_exit_codes_in_one_line(error: Exception, status: int,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise error

    assert guarded("x", fail)(argparse.Namespace(log_level="error")) == status
    err = capsys.readouterr().err
    assert err.startswith("eosclient x: ") and len(err.splitlines()) == 1
    assert str(error) in err


def test_copy_prints_a_progress_line_only_when_the_counts_move(
        capsys: pytest.CaptureFixture[str]) -> None:
    # An idle copy printed the same line every second (only its records/s changed, falling).
    from eosclient.cli import _report  # noqa: PLC0415
    from eosclient.processor import ProcessorStats  # noqa: PLC0415

    class Moving:
        def __init__(self) -> None:
            self.reads = 0

        @property
        def stats(self) -> ProcessorStats:
            self.reads += 1
            if self.reads == 12:
                stop.set()
            committed = 10 if self.reads >= 6 else 0  # idle, one commit, idle again
            return ProcessorStats(committed, committed, committed // 10, 0, self.reads * 1.0)

    stop = threading.Event()
    _report(Moving(), stop, 0.001)  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["records in 0, out 0, transactions committed 0, aborted 0",
                     "records in 10, out 10, transactions committed 1, aborted 0"]
