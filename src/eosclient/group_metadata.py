"""The consumer group membership a transaction's offsets are committed under (KIP-447)."""

from __future__ import annotations

from dataclasses import dataclass

from eosclient._core.limits import INT32_MAX, string_problem

__all__ = ["ConsumerGroupMetadata"]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Who is committing offsets: the group, and this consumer's place in it.

    ``send_offsets_to_transaction`` sends it with TxnOffsetCommit, so the group coordinator can
    refuse a zombie consumer's commit (KIP-447). A consumer that joined the group gives it out;
    a bare group id (``ConsumerGroupMetadata("copier")`` or just ``"copier"``) commits without
    that protection.

    Attributes:
        group_id: The consumer group.
        generation_id: The group generation the consumer joined in; -1 if unknown.
        member_id: The consumer's member id; empty if unknown.
        group_instance_id: The static member id (KIP-345), if the consumer has one.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: ``group_id`` is empty, ``generation_id`` is past int32, or a str does not
            fit a Kafka STRING (they go into TxnOffsetCommit, on the producer's I/O thread).
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.group_id, str):
            raise TypeError(f"group_id must be a str, got {type(self.group_id).__name__}")
        if not self.group_id:
            raise ValueError("group_id must not be empty")
        if type(self.generation_id) is not int:
            raise TypeError("generation_id must be an int")
        if not isinstance(self.member_id, str):
            raise TypeError("member_id must be a str")
        if self.group_instance_id is not None and not isinstance(self.group_instance_id, str):
            raise TypeError("group_instance_id must be a str or None")
        if not -1 <= self.generation_id <= INT32_MAX:
            raise ValueError(f"generation_id must be in -1..2**31-1, got {self.generation_id}")
        for name in ("group_id", "member_id", "group_instance_id"):
            value = getattr(self, name)
            problem = None if value is None else string_problem(value)
            if problem is not None:
                raise ValueError(f"{name} {value[:40]!r}... {problem}")
