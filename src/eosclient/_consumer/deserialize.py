"""The consumer's key and value deserializers, applied to what ``poll()`` drained.

The application's code runs here, on its own thread and without the consumer's lock. A
deserializer that raises must not move the position past the record it could not read: that
record was drained (the partition's position is already past it), so :func:`deserialize` says
where to rewind each failed partition, and ``poll()`` seeks it there under the lock. The records
of that partition after the failed one are dropped (they are fetched again after the rewind);
other partitions' records are delivered as usual.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from eosclient._consumer.ready import ConsumerRecord
from eosclient._core.records import Deserializer
from eosclient._core.types import TopicPartition
from eosclient.errors import DeserializationError

__all__ = ["Deserialized", "deserialize"]


class Deserialized(NamedTuple):
    """What :func:`deserialize` made of a drained list.

    Attributes:
        records: The records read, in the order drained.
        rewind: Each failed partition's first unread offset (its new position).
        error: The first failure, for ``poll()`` to raise when ``records`` is empty.
    """

    records: list[ConsumerRecord]
    rewind: dict[TopicPartition, int]
    error: DeserializationError | None


def deserialize(records: list[ConsumerRecord], key: Deserializer | None,
                value: Deserializer | None) -> Deserialized:
    """Apply ``key`` and ``value`` (either may be None) to every key and value that is not None.

    A partition whose record fails stops there: its later records are left out.
    """
    out: list[ConsumerRecord] = []
    rewind: dict[TopicPartition, int] = {}
    error: DeserializationError | None = None
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        if tp in rewind:
            continue
        try:
            k = _apply(key, record.key, record, "key")
            v = _apply(value, record.value, record, "value")
        except DeserializationError as exc:
            rewind[tp] = record.offset
            error = error or exc
            continue
        out.append(record._replace(key=k, value=v))
    return Deserialized(out, rewind, error)


def _apply(function: Deserializer | None, data: bytes | None, record: ConsumerRecord,
           field: str) -> Any:
    if function is None or data is None:
        return data
    try:
        return function(data)
    except Exception as exc:
        raise DeserializationError(
            f"the {field} deserializer raised {type(exc).__name__}: {exc}",
            topic=record.topic, partition=record.partition, offset=record.offset,
            field=field) from exc
