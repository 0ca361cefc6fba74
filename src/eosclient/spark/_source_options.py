"""The ``eosclient-kafka`` reader's options: parsed and checked before a query starts, with the
semantics of Spark's Kafka source (its documented options; the code is eosclient's own).

What to read is exactly one of ``subscribe`` (topics), ``assign`` (JSON ``{"topic": [0, 1]}``)
and ``subscribePattern`` (a regular expression over topic names, matched whole). Where to
begin and end is ``startingOffsets`` / ``endingOffsets``: a word, or JSON per partition
(``{"topic": {"0": 23, "1": -2}}``, -2 earliest, -1 latest). A JSON spec must name every
partition the source reads, no more and no fewer, as Spark's Kafka source requires; that is
checked against the brokers when the query starts (:func:`resolve`), all else here.

:mod:`eosclient.spark._source` holds the readers that use these.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from eosclient._core.types import TopicPartition
from eosclient.errors import ConfigError
from eosclient.spark._writer import positive_option

__all__ = ["EARLIEST", "LATEST", "Mode", "Offsets", "Options", "Spec", "Subscription", "resolve"]

EARLIEST = -2   # in a JSON offsets spec, as in Spark's Kafka source
LATEST = -1

Offsets = dict[str, dict[str, int]]  # topic -> partition (a str: JSON keys) -> offset
Spec = str | Offsets  # "earliest" / "latest", or JSON per partition (EARLIEST/LATEST codes kept)
Mode = Literal["stream", "batch"]
Positions = Callable[[list[TopicPartition], str], dict[TopicPartition, int]]

_WAYS = ("subscribe", "assign", "subscribePattern")
# Which words and JSON codes each offsets option takes, per mode (Spark's rules: a batch read
# cannot start at latest, an end cannot be earliest, a stream has no end).
_STARTING: dict[Mode, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "stream": (("earliest", "latest"), (EARLIEST, LATEST)),
    "batch": (("earliest",), (EARLIEST,))}
_ENDING: tuple[tuple[str, ...], tuple[int, ...]] = (("latest",), (LATEST,))


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions the source reads: ``way`` is ``subscribe`` (``topics``), ``assign``
    (``assigned``) or ``subscribePattern`` (``pattern``, matched whole against each topic the
    brokers list, so a topic created later is read once it matches)."""

    way: str
    topics: tuple[str, ...] = ()
    assigned: tuple[TopicPartition, ...] = ()
    pattern: re.Pattern[str] | None = None

    def partitions(self, list_topics: Callable[[], list[str]],
                   count: Callable[[str], int]) -> list[TopicPartition]:
        """The partitions read now (``list_topics`` and ``count`` ask the brokers)."""
        if self.way == "assign":
            return list(self.assigned)
        topics = self.topics
        if self.pattern is not None:
            topics = tuple(t for t in list_topics() if self.pattern.fullmatch(t))
        return [TopicPartition(t, p) for t in topics for p in range(count(t))]


@dataclass(frozen=True, slots=True)
class Options:
    """The reader's options, checked (:meth:`parse`)."""

    bootstrap_servers: str
    subscription: Subscription
    starting: Spec
    ending: Spec
    max_offsets: int | None
    timeout: float

    @classmethod
    def parse(cls, options: Mapping[str, str], mode: Mode = "stream", *,
              read_limits: bool = True) -> Options:
        """``read_limits``: whether this pyspark passes read limits (4.2+; else
        ``maxOffsetsPerTrigger`` is refused in a stream).

        Raises:
            ConfigError: an option is missing, malformed or not allowed in ``mode``; it names
                the option.
        """
        def get(key: str, default: str | None = None) -> str | None:
            for name, value in options.items():
                if name.lower() == key.lower():
                    return value
            return default

        servers = get("bootstrap.servers") or get("kafka.bootstrap.servers")
        if not servers:
            raise ConfigError("the source needs the brokers: .option('bootstrap.servers', "
                              "'host:port')", key="bootstrap.servers")
        subscription = _subscription({way: get(way) for way in _WAYS})
        starting = _spec(get("startingOffsets", "earliest") or "", "startingOffsets",
                         *_STARTING[mode])
        ending_text = get("endingOffsets")
        if mode == "stream" and ending_text is not None:
            raise ConfigError("a stream has no end: endingOffsets is for spark.read only",
                              key="endingOffsets")
        ending = _spec(ending_text or "latest", "endingOffsets", *_ENDING)
        max_offsets = positive_option(get("maxOffsetsPerTrigger"), "maxOffsetsPerTrigger", int)
        if mode == "stream" and max_offsets is not None and not read_limits:
            raise ConfigError("needs pyspark 4.2 or later (read limits for Python sources)",
                              key="maxOffsetsPerTrigger")
        return cls(servers, subscription, starting, ending, max_offsets,
                   positive_option(get("timeoutSeconds"), "timeoutSeconds", float) or 60.0)


def _subscription(given: Mapping[str, str | None]) -> Subscription:
    named = [way for way in _WAYS if given[way] is not None]
    if not named:
        raise ConfigError("name what to read: .option('subscribe', 'a,b'), .option('assign', "
                          "'{\"a\": [0, 1]}') or .option('subscribePattern', 'a.*')",
                          key="subscribe")
    if len(named) > 1:
        raise ConfigError(f"give one of subscribe, assign and subscribePattern, not "
                          f"{' and '.join(named)}", key=named[1])
    way, text = named[0], given[named[0]] or ""
    if way == "subscribe":
        topics = tuple(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise ConfigError("name the topics to read: .option('subscribe', 'a,b')",
                              key="subscribe")
        return Subscription(way, topics=topics)
    if way == "subscribePattern":
        try:
            return Subscription(way, pattern=re.compile(text))
        except re.error as exc:
            raise ConfigError(f"not a regular expression: {exc}", key=way) from None
    assigned: set[TopicPartition] = set()
    for topic, parts in _json(text, "assign", 'like {"topic": [0, 1]}').items():
        if not isinstance(parts, list) or not parts or not all(
                type(p) is int and p >= 0 for p in parts):
            raise ConfigError(f'expected JSON like {{"topic": [0, 1]}}, got {text!r}',
                              key="assign")
        assigned.update(TopicPartition(topic, p) for p in parts)
    if not assigned:
        raise ConfigError(f'expected JSON like {{"topic": [0, 1]}}, got {text!r}', key="assign")
    return Subscription(way, assigned=tuple(sorted(assigned)))


def _json(text: str, key: str, like: str) -> dict[str, object]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"not JSON {like}: {exc}", key=key) from None
    if not isinstance(data, dict):
        raise ConfigError(f"expected a JSON object {like}, got {text!r}", key=key)
    return data


def _spec(text: str, key: str, words: tuple[str, ...], codes: tuple[int, ...]) -> Spec:
    """An offsets option: one of ``words``, or JSON per partition with offsets >= 0 or one of
    ``codes`` (-2 earliest, -1 latest)."""
    word = text.strip().lower()
    if word in words:
        return word
    named = {EARLIEST: "-2 (earliest)", LATEST: "-1 (latest)"}
    allowed = " or ".join(named[c] for c in codes)
    if not word.startswith("{"):
        raise ConfigError(f"must be {' or '.join(words)}, or JSON per partition like "
                          f'{{"topic": {{"0": 23}}}}, got {text!r}', key=key)
    out: Offsets = {}
    for topic, parts in _json(text, key, 'like {"topic": {"0": 23}}').items():
        if not isinstance(parts, dict) or not parts:
            raise ConfigError(f'topic {topic!r}: expected {{"partition": offset}}, got '
                              f"{parts!r}", key=key)
        for partition, offset in parts.items():
            if not partition.isdigit() or type(offset) is not int or (
                    offset < 0 and offset not in codes):
                raise ConfigError(f"{topic}-{partition}: offset {offset!r}: give a partition "
                                  f"number and an offset >= 0 or {allowed}", key=key)
            out.setdefault(topic, {})[str(int(partition))] = offset
    return out


def resolve(spec: Spec, partitions: list[TopicPartition], key: str,
            positions: Positions) -> Offsets:
    """``spec`` as offsets of ``partitions``: words and JSON codes looked up with
    ``positions(tps, "earliest" | "latest")``, JSON offsets taken as they are.

    Raises:
        ConfigError: a JSON spec does not name exactly ``partitions`` (Spark's rule).
    """
    found: dict[TopicPartition, int] = {}
    if isinstance(spec, str):
        found = positions(partitions, spec)
    else:
        named = {TopicPartition(t, int(p)): offset for t, parts in spec.items()
                 for p, offset in parts.items()}
        if set(named) != set(partitions):
            missing = sorted(set(partitions) - set(named))
            extra = sorted(set(named) - set(partitions))
            raise ConfigError(
                "must name every partition read, and no other, as Spark's Kafka source "
                f"requires (-2 earliest, -1 latest): missing {_names(missing)}, not read "
                f"{_names(extra)}", key=key)
        for code, word in ((EARLIEST, "earliest"), (LATEST, "latest")):
            these = [tp for tp in partitions if named[tp] == code]
            if these:
                found.update(positions(these, word))
        found.update({tp: offset for tp, offset in named.items() if offset >= 0})
    out: Offsets = {}
    for tp in partitions:
        out.setdefault(tp.topic, {})[str(tp.partition)] = found[tp]
    return out


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps) or "none"
