"""Waiting for a group to show committed offsets (the broker applies them late): sans-IO steps
carried out on a scripted group and a clock that only moves when the steps sleep."""

from __future__ import annotations

import logging
import time

import pytest

from eosclient._core.types import TopicPartition
from eosclient._processor import visible
from eosclient._processor.steps import drive
from eosclient.errors import KafkaTimeoutError

TP = TopicPartition("in", 3)


class Group:
    """A group whose committed offset for TP moves to 10 once ``applied_at`` seconds passed."""

    def __init__(self, clock: list[float], applied_at: float) -> None:
        self.clock, self.applied_at, self.reads = clock, applied_at, 0

    def committed(self, partitions: list[TopicPartition], timeout: float,
                  ) -> dict[TopicPartition, int | None]:
        self.reads += 1
        return dict.fromkeys(partitions, 10 if self.clock[0] >= self.applied_at else 4)


class Clock:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def sleep(self, seconds: float) -> None:
        self.clock[0] += seconds


def wait(monkeypatch: pytest.MonkeyPatch, applied_at: float, timeout: float) -> Group:
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    group = Group(clock, applied_at)
    drive(visible.committed_steps({TP: 10}, timeout), {"consumer": group, "front": Clock(clock)})
    return group


def test_offsets_shown_at_once_need_one_read_and_no_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    assert wait(monkeypatch, 0.0, 30.0).reads == 1
    assert not caplog.records


def test_a_long_wait_is_named_once_at_warning(monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "eosclient.processor")
    assert wait(monkeypatch, 12.0, 30.0).reads > 2
    [warning] = caplog.records
    assert "in/3: 4 (committed 10)" in warning.getMessage()
    assert "apply them late" in warning.getMessage()


def test_offsets_never_shown_raise_a_timeout_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KafkaTimeoutError, match=r"after 20\.0s: in/3: 4 \(committed 10\)"):
        wait(monkeypatch, 1e9, 20.0)
