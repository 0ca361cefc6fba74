"""The driver's read-ahead thread: order kept, errors handed over, the thread stops early."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from eosclient.spark._prefetch import prefetched

pytestmark = pytest.mark.spark


def test_items_come_in_order_and_end() -> None:
    assert list(prefetched(range(100), depth=3)) == list(range(100))


def test_an_error_arrives_where_it_happened() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise ValueError("spark failed")

    got = prefetched(items(), depth=2)
    assert next(got) == 1
    with pytest.raises(ValueError, match="spark failed"):
        next(got)


def test_a_consumer_that_stops_early_stops_the_thread() -> None:
    before = threading.active_count()
    got = prefetched(iter(range(10_000)), depth=2)
    assert next(got) == 0
    got.close()  # as when sending fails
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before
