"""The checker's comparison, on hand-made lists (no broker)."""

from __future__ import annotations

import pytest

from eosclient import TopicPartition
from eosclient.consumer import ConsumerRecord
from eosclient.testing.checker import Seen, compare, input_seen, output_seen, source_id


def ins(*offsets: int, partition: int = 0) -> list[Seen]:
    return [Seen(partition, o, source_id("in", partition, o)) for o in offsets]


def outs(*sources: tuple[int, int], partition: int = 0, start: int = 0) -> list[Seen]:
    return [Seen(partition, start + i, source_id("in", p, o)) for i, (p, o) in enumerate(sources)]


def test_a_faithful_copy_is_ok() -> None:
    report = compare(ins(0, 1, 2) + ins(0, 1, partition=1),
                     outs((0, 0), (1, 0), (0, 1), (0, 2), (1, 1)))
    assert report.ok
    assert (report.input_records, report.output_records) == (5, 5)
    assert "OK" in str(report)


def test_lost_records_are_counted_on_their_input_partition() -> None:
    report = compare(ins(0, 1, 2) + ins(0, partition=1), outs((0, 0), (0, 2)))
    assert (report.totals.lost, report.totals.total()) == (2, 2)
    assert report.partitions[TopicPartition("input", 0)].lost == 1
    assert report.partitions[TopicPartition("input", 1)].lost == 1
    assert not report.ok
    assert "in/0/1" in str(report)


def test_duplicates_count_every_copy_after_the_first() -> None:
    report = compare(ins(0, 1), outs((0, 0), (0, 1), (0, 1), (0, 1)))
    assert report.totals.duplicated == 2
    assert report.totals.out_of_order == 0  # a duplicate is not also out of order


def test_a_duplicate_on_another_output_partition_counts_there() -> None:
    report = compare(ins(0), outs((0, 0)) + outs((0, 0), partition=3))
    assert report.partitions[TopicPartition("output", 3)].duplicated == 1


def test_aborted_ids_in_the_output_are_aborted_but_read() -> None:
    aborted = source_id("in", 0, 7)
    report = compare(ins(0), outs((0, 0), (0, 7)), aborted=[aborted])
    assert (report.totals.aborted_read, report.totals.unexpected) == (1, 0)


def test_an_output_matching_nothing_is_unexpected() -> None:
    report = compare(ins(0), [*outs((0, 0)), Seen(0, 9, "")])
    assert report.totals.unexpected == 1


def test_source_offsets_going_back_within_an_output_partition_are_out_of_order() -> None:
    report = compare(ins(0, 1, 2, 3), outs((0, 0), (0, 2), (0, 1), (0, 3)))
    assert report.totals.out_of_order == 1
    assert report.totals.lost == 0


def test_order_is_kept_per_input_partition_only() -> None:
    # Two input partitions interleaved into one output partition is fine.
    report = compare(ins(5, 6) + ins(0, 1, partition=1), outs((0, 5), (1, 0), (0, 6), (1, 1)))
    assert report.ok


def test_outputs_are_sorted_by_offset_before_the_order_check() -> None:
    report = compare(ins(0, 1), list(reversed(outs((0, 0), (0, 1)))))
    assert report.ok


def test_examples_are_capped() -> None:
    report = compare(ins(*range(20)), [], max_examples=3)
    assert report.totals.lost == 20
    assert len(report.examples["lost"]) == 3


def test_duplicate_input_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        compare([Seen(0, 0, "a"), Seen(0, 1, "a")], [])


def record(offset: int, value: bytes | None, headers: tuple = ()) -> ConsumerRecord:
    return ConsumerRecord("t", 2, offset, None, value, headers, 0)


def test_ids_from_the_header_or_the_value() -> None:
    assert input_seen(record(4, b"x")).record_id == "t/2/4"
    assert input_seen(record(4, b"x"), "value").record_id == "x"
    assert output_seen(record(1, b"x", (("eos.src", b"in/0/3"),))).record_id == "in/0/3"
    assert output_seen(record(1, b"x")).record_id == ""
    assert output_seen(record(1, b"\xff"), "value").record_id == "\\xff"
