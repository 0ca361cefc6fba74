"""The fault rules of `eosclient.testing.proxy`, and the message surgery they need.

A `Rule` says which requests it takes (API key, version, the n-th match) and what happens to them
(an action: `Delay`, `DropResponse`, `Cut`, `ErrorResponse`, `RewriteError`). A `RuleBook` holds a
proxy's rules and picks, for each request, the one that fires. Everything else here works on
single messages with kafka-python's generated classes: building an error response that mirrors a
request, setting every error code of a response, pointing broker addresses at the proxy, and
encoding a response behind its original correlation id. Nothing here does I/O.

The codecs are eosclient's own (`eosclient._protocol.apis.APIS`) plus a few APIs eosclient does
not send but a cluster front (:mod:`eosclient.testing.cluster_front`) must read or answer as a
broker would: DeleteRecords, OffsetForLeaderEpoch, DescribeCluster, DescribeTopicPartitions.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from kafka.protocol import admin as _admin
from kafka.protocol import consumer as _consumer

from eosclient._protocol.apis import api_for
from eosclient.errors import ApiKey

__all__ = [
    "ERROR_RESPONSE_APIS",
    "Action",
    "Cut",
    "Delay",
    "DropResponse",
    "ErrorResponse",
    "RewriteError",
    "Rule",
    "RuleBook",
]


@dataclass(frozen=True, slots=True)
class Delay:
    """Hold the request (before forwarding) or the response (before delivering) for `seconds`.

    Later frames in the same direction wait behind it, as they would on a slow link: Kafka answers
    a connection's requests in order, so nothing may overtake.
    """

    seconds: float
    direction: Literal["request", "response"] = "request"

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError(f"Delay seconds must be >= 0, not {self.seconds}")
        if self.direction not in ("request", "response"):
            raise ValueError(f"Delay direction must be 'request' or 'response': {self.direction!r}")


@dataclass(frozen=True, slots=True)
class DropResponse:
    """Forward the request, let the broker act, and never deliver its response.

    The client's later responses on the connection still arrive, in order; the client sees
    nothing but a request that is never answered (and times out).
    """


@dataclass(frozen=True, slots=True)
class Cut:
    """Close both sides of the connection.

    `"before"`: instead of forwarding the request (the broker never sees it). `"after"`: once the
    broker has answered, instead of delivering the response (the broker acted; the client cannot
    know).
    """

    when: Literal["before", "after"] = "before"

    def __post_init__(self) -> None:
        if self.when not in ("before", "after"):
            raise ValueError(f"Cut when must be 'before' or 'after', not {self.when!r}")


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """Answer the request in the proxy with `code` in every error field; never forward it."""

    code: int


@dataclass(frozen=True, slots=True)
class RewriteError:
    """Forward the request, let the broker act, then set every error code it answers to `code`."""

    code: int


Action = Delay | DropResponse | Cut | ErrorResponse | RewriteError


@dataclass(eq=False, kw_only=True)
class Rule:
    """Which requests a fault applies to, what it does, and how often it has fired.

    A rule counts every request its filters take (`matched`) on all of the proxy's connections.
    It fires on a counted request when `nth` is unset or equal to that count, and it has fired
    fewer than `times` times (so a rule with `nth` fires once at most). One rule at most acts on
    a request: the first added that fires; the others still count it.

    Args:
        action: what to do with the request.
        api_key: take only this API (every API when None). Required by `ErrorResponse` and
            `RewriteError`, which must know the response's schema.
        api_version: take only this version of it (every version when None).
        nth: fire on the n-th request taken only (1-based); every one when None.
        times: fire at most this many times; None for no limit.

    Attributes:
        matched: requests the filters have taken so far.
        fired: times the action has been applied so far (counted when the request arrives).

    Raises:
        ValueError: an impossible rule; an `ErrorResponse` for an API outside
            `ERROR_RESPONSE_APIS`; a `RewriteError` for an API eosclient has no schema for.
    """

    action: Action
    api_key: int | None = None
    api_version: int | None = None
    nth: int | None = None
    times: int | None = 1
    fired: int = field(default=0, init=False)
    matched: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.nth is not None and self.nth < 1:
            raise ValueError(f"nth is 1-based, not {self.nth}")
        if self.times is not None and self.times < 1:
            raise ValueError(f"times must be >= 1 or None, not {self.times}")
        if isinstance(self.action, ErrorResponse | RewriteError):
            self._check_codec()

    def takes(self, api_key: int, api_version: int) -> bool:
        """Whether the filters take a request of this API and version."""
        key_ok = self.api_key is None or self.api_key == api_key
        return key_ok and (self.api_version is None or self.api_version == api_version)

    def due(self) -> bool:
        """Whether the request just counted in `matched` makes the rule fire."""
        nth_ok = self.nth is None or self.matched == self.nth
        return nth_ok and (self.times is None or self.fired < self.times)

    def _check_codec(self) -> None:
        name = type(self.action).__name__
        if self.api_key is None:
            raise ValueError(f"{name} needs api_key: the proxy must know the response's schema")
        if isinstance(self.action, ErrorResponse) and self.api_key not in ERROR_RESPONSE_APIS:
            known = ", ".join(api_label(k) for k in sorted(ERROR_RESPONSE_APIS))
            raise ValueError(
                f"ErrorResponse cannot answer {api_label(self.api_key)}; it answers {known}"
            )
        api = known_api(self.api_key)
        if api is None:
            raise ValueError(f"{name}: API key {self.api_key} has no kafka-python schema here")
        top = api.response.max_version
        if self.api_version is not None and not 0 <= self.api_version <= top:
            label = api_label(api.key)
            raise ValueError(f"{name}: {label} v{self.api_version} is outside 0..{top}")


class RuleBook:
    """A proxy's rules, safe to change from any thread while the proxy consults them."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._rules: list[Rule] = []

    def add(self, rule: Rule) -> Rule:
        """Append `rule` (it acts after the rules added before it); return it."""
        with self._changed:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Remove every rule; requests already taken keep their actions."""
        with self._changed:
            self._rules.clear()

    def match(self, api_key: int, api_version: int) -> Rule | None:
        """Count the request against every rule; return the one that fires on it, if any."""
        with self._changed:
            chosen = None
            for rule in self._rules:
                if not rule.takes(api_key, api_version):
                    continue
                rule.matched += 1
                if chosen is None and rule.due():
                    rule.fired += 1
                    chosen = rule
            if chosen is not None:
                self._changed.notify_all()
            return chosen

    def wait_fired(self, rule: Rule, timeout: float, count: int = 1) -> bool:
        """Block until `rule` has fired `count` times or `timeout` passes; return whether it has."""
        with self._changed:
            return self._changed.wait_for(lambda: rule.fired >= count, timeout)


# --- message surgery --------------------------------------------------------------------------

_INT16: Final = struct.Struct(">h")

# API keys a cluster front reads or answers that eosclient itself does not send.
DELETE_RECORDS: Final = 21
OFFSET_FOR_LEADER_EPOCH: Final = 23
DESCRIBE_CLUSTER: Final = 60
DESCRIBE_TOPIC_PARTITIONS: Final = 75


class Codec(Protocol):
    """kafka-python's request and response classes of one API (an `Api` row is one)."""

    @property
    def key(self) -> int: ...
    @property
    def request(self) -> Any: ...
    @property
    def response(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class _Codec:
    key: int
    request: Any
    response: Any


def _codec(module: Any, name: str) -> _Codec:
    request = getattr(module, f"{name}Request")
    return _Codec(request.API_KEY, request, getattr(module, f"{name}Response"))


_OTHER_CODECS: Final = {
    codec.key: codec
    for codec in (
        _codec(_admin, "DeleteRecords"),
        _codec(_consumer, "OffsetForLeaderEpoch"),
        _codec(_admin, "DescribeCluster"),
        _codec(_admin, "DescribeTopicPartitions"),
    )
}


def known_api(api_key: int) -> Codec | None:
    """The kafka-python classes for `api_key`, or None if the proxy cannot read it."""
    try:
        return api_for(api_key)
    except (KeyError, ValueError):
        return _OTHER_CODECS.get(api_key)


def api_label(api_key: int) -> str:
    """The API's name as Kafka spells it (``EndTxn``), or its number if the proxy has no codec."""
    codec = known_api(api_key)
    return str(api_key) if codec is None else codec.request.__name__.removesuffix("Request")


def expects_response(api_key: int, api_version: int, body: bytes) -> bool:
    """Whether the request in `body` (a frame without its size) will be answered.

    Only Produce with acks=0 goes unanswered. Its acks follow the request header and, from v3,
    the transactional id, so they are read by hand rather than decoding the records.
    """
    if api_key != ApiKey.PRODUCE:
        return True
    flexible = bool(api_for(api_key).request.flexible_version_q(api_version))  # v9+
    pos = _skip_request_header(body, flexible)
    if api_version >= 3:
        pos = _skip_nullable_string(body, pos, flexible)
    (acks,) = _INT16.unpack_from(body, pos)
    return bool(acks != 0)


def _skip_request_header(body: bytes, flexible: bool) -> int:
    # api_key, api_version, correlation_id, then client_id: a classic nullable string even in
    # flexible header v2, which adds tagged fields after it.
    length: int = _INT16.unpack_from(body, 8)[0]
    pos = 10 + max(length, 0)
    if flexible:
        count, pos = _uvarint(body, pos)
        for _ in range(count):
            _tag, pos = _uvarint(body, pos)
            size, pos = _uvarint(body, pos)
            pos += size
    return pos


def _skip_nullable_string(body: bytes, pos: int, flexible: bool) -> int:
    if flexible:
        length_plus_one, pos = _uvarint(body, pos)
        return pos + max(length_plus_one - 1, 0)
    length: int = _INT16.unpack_from(body, pos)[0]
    return pos + 2 + max(length, 0)


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def decode_response(api: Codec, version: int, body: bytes) -> Any:
    """Decode a response frame body (header included) at the request's version."""
    return api.response.decode(body, version=version, header=True)


def encode_response(api: Codec, response: Any, version: int, correlation_id: int) -> bytes:
    """Encode `response` as a whole frame (size, header, body) answering `correlation_id`.

    An ApiVersions error is sent with a v0 body, as brokers do, so a client that asked in a
    version the broker does not speak can read it (kafka-python decodes it the same way).
    """
    if api.key == ApiKey.API_VERSIONS and response.error_code != 0:
        version = 0
    if version != response.API_VERSION:
        # kafka-python's API_VERSION setter updates a *request* header; drop the decoded one.
        response._header = None
        response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def set_error_codes(response: Any, version: int, code: int) -> int:
    """Set every error-code field of `response` (nested ones too) to `code`; return how many."""
    return _set_codes(response, response._struct, version, code)


def _set_codes(item: Any, schema: Any, version: int, code: int) -> int:
    count = 0
    for child in schema.fields.values():
        if not child.for_version_q(version):
            continue
        value = getattr(item, child.name)
        if child.is_struct_array():
            count += sum(_set_codes(entry, child, version, code) for entry in value or ())
        elif child.is_struct():
            count += 0 if value is None else _set_codes(value, child, version, code)
        elif child.name.endswith("error_code"):
            setattr(item, child.name, code)
            count += 1
    return count


def point_at(api_key: int, response: Any, host: str, port: int) -> None:
    """Replace the broker addresses in a Metadata or FindCoordinator response with host:port."""
    if api_key == ApiKey.METADATA:
        entries: Iterable[Any] = response.brokers or ()
    elif response.version >= 4:  # FindCoordinator v4+ answers a batch of keys
        entries = [c for c in response.coordinators if c.error_code == 0]
    else:
        entries = [response] if response.error_code == 0 else []
    for entry in entries:
        entry.host = host
        entry.port = port


def error_response(api: Codec, version: int, request_body: bytes, code: int) -> Any:
    """Build `api`'s response at `version` with `code` in every error field.

    Per-partition (and per-coordinator, per-group) entries mirror the request, so the client
    finds an answer for everything it asked about.
    """
    request = api.request.decode(request_body, version=version, header=True)
    response = api.response(version=version, **_ERROR_BODIES[api.key](api.response, request))
    set_error_codes(response, version, code)
    return response


def _entry(schema: Any, array: str, /, **values: Any) -> Any:
    """One element of the struct array `array` in `schema` (a message class or a struct field).

    Values for fields the schema lacks are left out, so one builder serves APIs whose entries
    differ only in such fields (OffsetCommit's topic_id, which TxnOffsetCommit has not).
    """
    return _new(schema.fields[array], **values)


def _new(array: Any, /, **values: Any) -> Any:
    """One element of the struct array field `array`, with the values its schema has."""
    return array.data_class(**{k: v for k, v in values.items() if k in array.fields})


def _produce(response: Any, request: Any) -> dict[str, Any]:
    topics = response.fields["responses"]

    def partitions(topic: Any) -> list[Any]:
        return [
            _entry(
                topics,
                "partition_responses",
                index=p.index,
                base_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=-1,
            )
            for p in topic.partition_data
        ]

    return {
        "responses": [
            _entry(
                response,
                "responses",
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=partitions(t),
            )
            for t in request.topic_data
        ]
    }


def _add_partitions(response: Any, request: Any) -> dict[str, Any]:
    if request.version <= 3:
        return {
            "results_by_topic_v3_and_below": _topic_results(
                response.fields["results_by_topic_v3_and_below"], request.v3_and_below_topics
            )
        }
    transactions = response.fields["results_by_transaction"]
    return {
        "results_by_transaction": [
            _entry(
                response,
                "results_by_transaction",
                transactional_id=t.transactional_id,
                topic_results=_topic_results(transactions.fields["topic_results"], t.topics),
            )
            for t in request.transactions
        ]
    }


def _topic_results(schema: Any, topics: Iterable[Any]) -> list[Any]:
    return [
        _new(
            schema,
            name=t.name,
            results_by_partition=[
                _entry(schema, "results_by_partition", partition_index=p) for p in t.partitions
            ],
        )
        for t in topics
    ]


def _offset_commit(response: Any, request: Any) -> dict[str, Any]:
    topics = response.fields["topics"]
    return {
        "topics": [
            _entry(
                response,
                "topics",
                name=t.name,
                topic_id=getattr(t, "topic_id", None),
                partitions=[
                    _entry(topics, "partitions", partition_index=p.partition_index)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    }


def _offset_fetch(response: Any, request: Any) -> dict[str, Any]:
    if request.version <= 7:
        return {"topics": _fetched_topics(response.fields["topics"], request.topics)}
    groups = response.fields["groups"]
    return {
        "groups": [
            _entry(
                response,
                "groups",
                group_id=g.group_id,
                topics=_fetched_topics(groups.fields["topics"], g.topics),
            )
            for g in request.groups
        ]
    }


def _fetched_topics(schema: Any, topics: Iterable[Any] | None) -> list[Any]:
    return [
        _new(
            schema,
            name=t.name,
            topic_id=getattr(t, "topic_id", None),
            partitions=[
                _entry(schema, "partitions", partition_index=p, committed_offset=-1)
                for p in t.partition_indexes
            ],
        )
        for t in topics or ()
    ]


def _find_coordinator(response: Any, request: Any) -> dict[str, Any]:
    if request.version <= 3:
        return {"node_id": -1, "host": "", "port": -1}
    return {
        "coordinators": [
            _entry(response, "coordinators", key=k, node_id=-1, host="", port=-1)
            for k in request.coordinator_keys
        ]
    }


def _fetch(response: Any, request: Any) -> dict[str, Any]:
    # The top-level error_code (v7+) is about fetch sessions; a broker answers partitions'
    # errors there (the cluster front sets it back to NONE).
    topics = response.fields["responses"]
    return {
        "responses": [
            _entry(
                response,
                "responses",
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[
                    _entry(
                        topics,
                        "partitions",
                        partition_index=p.partition,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        log_start_offset=-1,
                        preferred_read_replica=-1,
                        records=b"",  # empty, not null: librdkafka reads null as an error
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    }


def _list_offsets(response: Any, request: Any) -> dict[str, Any]:
    topics = response.fields["topics"]
    return {
        "topics": [
            _entry(
                response,
                "topics",
                name=t.name,
                partitions=[
                    _entry(topics, "partitions", partition_index=p.partition_index,
                           old_style_offsets=[], timestamp=-1, offset=-1, leader_epoch=-1)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    }


def _offset_for_leader_epoch(response: Any, request: Any) -> dict[str, Any]:
    topics = response.fields["topics"]
    return {
        "topics": [
            _entry(
                response,
                "topics",
                topic=t.topic,
                partitions=[
                    _entry(topics, "partitions", partition=p.partition, leader_epoch=-1,
                           end_offset=-1)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    }


def _delete_records(response: Any, request: Any) -> dict[str, Any]:
    topics = response.fields["topics"]
    return {
        "topics": [
            _entry(
                response,
                "topics",
                name=t.name,
                partitions=[
                    _entry(topics, "partitions", partition_index=p.partition_index,
                           low_watermark=-1)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    }


def _leave_group(response: Any, request: Any) -> dict[str, Any]:
    if request.version <= 2:
        return {}
    return {
        "members": [
            _entry(response, "members", member_id=m.member_id,
                   group_instance_id=m.group_instance_id)
            for m in request.members
        ]
    }


def _describe_groups(response: Any, request: Any) -> dict[str, Any]:
    return {
        "groups": [
            _entry(response, "groups", group_id=g, group_state="", protocol_type="",
                   protocol_data="", members=[])
            for g in request.groups
        ]
    }


def _fixed(**values: Any) -> Callable[[Any, Any], dict[str, Any]]:
    return lambda response, request: dict(values)


_ERROR_BODIES: Final[dict[int, Callable[[Any, Any], dict[str, Any]]]] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.INIT_PRODUCER_ID: _fixed(producer_id=-1, producer_epoch=-1),
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions,
    ApiKey.ADD_OFFSETS_TO_TXN: _fixed(),
    ApiKey.END_TXN: _fixed(producer_id=-1, producer_epoch=-1),
    ApiKey.TXN_OFFSET_COMMIT: _offset_commit,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.HEARTBEAT: _fixed(),
    ApiKey.JOIN_GROUP: _fixed(generation_id=-1),
    ApiKey.SYNC_GROUP: _fixed(assignment=b""),
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    DELETE_RECORDS: _delete_records,
    ApiKey.LEAVE_GROUP: _leave_group,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
}

#: The APIs `ErrorResponse` can answer.
ERROR_RESPONSE_APIS: Final = frozenset(int(key) for key in _ERROR_BODIES)
