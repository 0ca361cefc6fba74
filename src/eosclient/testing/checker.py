"""The exactly-once checker: compare an input topic with the output a copy loop wrote.

Both topics are read with :class:`~eosclient.ReadCommittedConsumer` (every partition, from the
beginning to the last stable offset), then compared without I/O by :func:`compare`, which a test
may also call on hand-made lists.

The record id convention:

* ``match="header"`` (the default): an input record's id is ``"topic/partition/offset"``; an
  output record carries the id of the input record it came from in its ``eos.src`` header
  (UTF-8), which :class:`~eosclient.ExactlyOnceProcessor` adds to everything it sends.
* ``match="value"``: for identity copies made by other tools. A record's id is its value
  (decoded as UTF-8, undecodable bytes escaped); input values must then be unique.

Anomalies, each counted per partition (lost ones on the input partition, the others on the
output partition they were read from):

* **lost**: an input record no output record refers to;
* **duplicated**: every output record after the first with the same id;
* **aborted-but-read**: an output record whose id is in ``aborted`` (ids the test wrote in
  transactions it aborted: they must never reach the output);
* **unexpected**: an output record that refers to no input record and to no aborted one;
* **out-of-order**: within one output partition, a record whose source offset is lower than
  the previous record's from the same input partition (duplicates are not counted twice).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from eosclient._core.types import TopicPartition
from eosclient.admin import Admin
from eosclient.consumer import ConsumerRecord, ReadCommittedConsumer
from eosclient.errors import KafkaTimeoutError

__all__ = ["SOURCE_HEADER", "CheckReport", "Counts", "Seen", "check", "compare", "read_topic",
           "source_id"]

SOURCE_HEADER: Final = "eos.src"
KINDS: Final = ("lost", "duplicated", "aborted_read", "unexpected", "out_of_order")
Match = Literal["header", "value"]


@dataclass(frozen=True, slots=True)
class Seen:
    """One record as the checker sees it: where it was read, and its record id."""

    partition: int
    offset: int
    record_id: str


@dataclass(slots=True)
class Counts:
    """The anomalies found on one partition."""

    lost: int = 0
    duplicated: int = 0
    aborted_read: int = 0
    unexpected: int = 0
    out_of_order: int = 0

    def total(self) -> int:
        """The sum of every count."""
        return sum(dataclasses.astuple(self))


@dataclass(frozen=True)
class CheckReport:
    """What :func:`compare` found: totals, per partition counts, and a few examples of each.

    ``str(report)`` is a short readable summary; ``report.ok`` is True when nothing is wrong.
    """

    input_topic: str
    output_topic: str
    input_records: int
    output_records: int
    totals: Counts
    partitions: dict[TopicPartition, Counts] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every count is zero."""
        return self.totals.total() == 0

    def __str__(self) -> str:
        lines = [f"{self.input_topic} -> {self.output_topic}: {self.input_records} records in, "
                 f"{self.output_records} out: {'OK' if self.ok else 'ANOMALIES'}"]
        for kind in KINDS:
            lines.append(f"  {kind.replace('_', '-')}: {getattr(self.totals, kind)}")
            lines += [f"    e.g. {example}" for example in self.examples.get(kind, [])]
        for tp, counts in sorted(self.partitions.items()):
            if counts.total():
                found = ", ".join(f"{k}={getattr(counts, k)}" for k in KINDS if getattr(counts, k))
                lines.append(f"  {tp.topic}/{tp.partition}: {found}")
        return "\n".join(lines)


def source_id(topic: str, partition: int, offset: int) -> str:
    """The record id of an input record: ``"topic/partition/offset"``."""
    return f"{topic}/{partition}/{offset}"


def compare(inputs: Sequence[Seen], outputs: Sequence[Seen], *, aborted: Iterable[str] = (),
            input_topic: str = "input", output_topic: str = "output",
            max_examples: int = 5) -> CheckReport:
    """Compare what was read from the input with what was read from the output (no I/O).

    Args:
        inputs: The input records (their ids unique).
        outputs: The output records, in any order (they are sorted by partition and offset).
        aborted: Ids known to have been written only in aborted transactions.
        input_topic: Names the input partitions in the report.
        output_topic: Names the output partitions in the report.
        max_examples: How many examples of each anomaly the report keeps.

    Returns:
        The report.

    Raises:
        ValueError: two input records have the same id.
    """
    tally = _Tally(input_topic, output_topic, max_examples)
    origin = _origins(inputs)
    tally.lost(inputs, {seen.record_id for seen in outputs})
    tally.walk(sorted(outputs, key=lambda s: (s.partition, s.offset)), origin, set(aborted))
    return tally.report(len(inputs), len(outputs))


def _origins(inputs: Sequence[Seen]) -> dict[str, Seen]:
    origin: dict[str, Seen] = {}
    for seen in inputs:
        if seen.record_id in origin:
            raise ValueError(f"two input records have the id {seen.record_id!r}: ids must be "
                             "unique (with match='value', the values)")
        origin[seen.record_id] = seen
    return origin


class _Tally:
    """The counts and examples as :func:`compare` finds them."""

    def __init__(self, input_topic: str, output_topic: str, max_examples: int) -> None:
        self.topics = (input_topic, output_topic)
        self.max_examples = max_examples
        self.totals = Counts()
        self.partitions: dict[TopicPartition, Counts] = {}
        self.examples: dict[str, list[str]] = {}

    def lost(self, inputs: Sequence[Seen], found: set[str]) -> None:
        for seen in inputs:
            if seen.record_id not in found:
                self.add("lost", self.topics[0], seen, "has no output")

    def walk(self, outputs: Sequence[Seen], origin: dict[str, Seen], aborted: set[str]) -> None:
        counted: Counter[str] = Counter()
        last: dict[tuple[int, int], int] = {}  # (output partition, input partition) -> offset
        for seen in outputs:
            counted[seen.record_id] += 1
            source = origin.get(seen.record_id)
            if counted[seen.record_id] > 1:
                self.add("duplicated", self.topics[1], seen, f"copy {counted[seen.record_id]}")
            elif seen.record_id in aborted:
                self.add("aborted_read", self.topics[1], seen, "was aborted")
            elif source is None:
                self.add("unexpected", self.topics[1], seen, "matches no input record")
            else:
                key = (seen.partition, source.partition)
                if key in last and source.offset < last[key]:
                    self.add("out_of_order", self.topics[1], seen,
                             f"comes after source offset {last[key]}")
                last[key] = source.offset

    def add(self, kind: str, topic: str, seen: Seen, why: str) -> None:
        tp = TopicPartition(topic, seen.partition)
        counts = self.partitions.setdefault(tp, Counts())
        setattr(counts, kind, getattr(counts, kind) + 1)
        setattr(self.totals, kind, getattr(self.totals, kind) + 1)
        examples = self.examples.setdefault(kind, [])
        if len(examples) < self.max_examples:
            examples.append(f"{topic}/{seen.partition}@{seen.offset} (id {seen.record_id!r}) {why}")

    def report(self, inputs: int, outputs: int) -> CheckReport:
        return CheckReport(self.topics[0], self.topics[1], inputs, outputs, self.totals,
                           self.partitions, self.examples)


# -- reading --------------------------------------------------------------------------------------

def input_seen(record: ConsumerRecord, match: Match = "header") -> Seen:
    """An input record's :class:`Seen` under the ``match`` convention."""
    if match == "value":
        return Seen(record.partition, record.offset, _text(record.value))
    return Seen(record.partition, record.offset,
                source_id(record.topic, record.partition, record.offset))


def output_seen(record: ConsumerRecord, match: Match = "header") -> Seen:
    """An output record's :class:`Seen`: its ``eos.src`` header (``""`` if it has none), or
    its value with ``match="value"``."""
    if match == "value":
        return Seen(record.partition, record.offset, _text(record.value))
    found = [v for k, v in record.headers if k == SOURCE_HEADER]
    return Seen(record.partition, record.offset, _text(found[0]) if found else "")


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", "backslashreplace")


def read_topic(bootstrap_servers: str | None, topic: str, *, timeout: float = 30.0,
               config: Mapping[str, object] | None = None) -> list[ConsumerRecord]:
    """Every committed record of every partition of ``topic``, up to each last stable offset.

    Args:
        bootstrap_servers: The cluster (None: ``config``'s ``bootstrap.servers``).
        config: librdkafka-style settings for the admin and the consumer that read (a secured
            cluster's ``security.protocol``, SASL, TLS, ...).

    Raises:
        KafkaTimeoutError: not read to the end within ``timeout`` (an open transaction holds
            the LSO back only where it is; this is about slowness or a broker that is down).
        EosError: the topic does not exist, or a client failed.
    """
    deadline = time.monotonic() + timeout
    settings = dict(config or {})
    if bootstrap_servers is not None:
        settings["bootstrap.servers"] = bootstrap_servers
    with Admin(config=settings) as admin:
        (described,) = admin.describe_topics([topic], timeout=_left(deadline, topic))
    tps = [TopicPartition(topic, p.partition) for p in described.partitions]
    settings |= {"auto.offset.reset": "earliest", "fetch.max.wait.ms": 100}
    with ReadCommittedConsumer(config=settings) as consumer:
        consumer.assign(tps)
        ends = {tp: consumer.last_stable_offset(tp, _left(deadline, topic)) for tp in tps}
        records: list[ConsumerRecord] = []
        pending = [tp for tp in tps if ends[tp] > 0]
        while pending:
            records += consumer.poll(min(0.2, _left(deadline, topic)))
            pending = [tp for tp in pending
                       if consumer.position(tp, _left(deadline, topic)) < ends[tp]]
    return [r for r in records if r.offset < ends[TopicPartition(r.topic, r.partition)]]


def _left(deadline: float, topic: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise KafkaTimeoutError(f"reading {topic!r} to its end timed out")
    return left


def check(bootstrap_servers: str, input_topic: str, output_topic: str, *,
          match: Match = "header", aborted: Iterable[str] = (), timeout: float = 30.0,
          max_examples: int = 5) -> CheckReport:
    """Read both topics to their ends and :func:`compare` them.

    Raises:
        KafkaTimeoutError: a topic was not read to its end within ``timeout`` (each).
        EosError: a topic does not exist, or the consumer failed.
        ValueError: two input records have the same id.
    """
    inputs = [input_seen(r, match) for r in read_topic(bootstrap_servers, input_topic,
                                                        timeout=timeout)]
    outputs = [output_seen(r, match) for r in read_topic(bootstrap_servers, output_topic,
                                                          timeout=timeout)]
    return compare(inputs, outputs, aborted=aborted, input_topic=input_topic,
                   output_topic=output_topic, max_examples=max_examples)
