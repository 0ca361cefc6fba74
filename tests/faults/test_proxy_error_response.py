"""`ErrorResponse`: the proxy answers in the broker's place, the answer mirrors the request at
every version of every API it covers, and rules that cannot be encoded are refused."""

from __future__ import annotations

from typing import Any

import pytest
from _proxy_clients import (
    CONCURRENT_TRANSACTIONS,
    MESSAGE_TOO_LARGE,
    broker_epoch,
    encoded,
    init_producer_id,
    produce_with_confluent,
    txn_id,
)
from confluent_kafka import KafkaError

from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey
from eosclient.testing._proxy_rules import (
    DELETE_RECORDS,
    OFFSET_FOR_LEADER_EPOCH,
    api_label,
    encode_response,
    error_response,
    known_api,
)
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import (
    ERROR_RESPONSE_APIS,
    Delay,
    DropResponse,
    ErrorResponse,
    KafkaProxy,
    RewriteError,
    Rule,
)

pytestmark = pytest.mark.proxy


# --- ErrorResponse -------------------------------------------------------------------------


def test_error_response_answers_without_the_broker(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    rule = proxy.add_rule(
        Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=ErrorResponse(CONCURRENT_TRANSACTIONS))
    )
    txn = txn_id()
    answered = init_producer_id(proxy, txn)
    assert answered.error_code == CONCURRENT_TRANSACTIONS
    assert (answered.producer_id, answered.producer_epoch) == (-1, -1)
    assert rule.fired == 1
    assert broker_epoch(broker, txn) == 0  # the broker had never seen this transactional id


def test_error_response_on_produce_is_read_by_librdkafka(
    broker: RunningBroker, proxy: KafkaProxy, topic_name: str
) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, action=ErrorResponse(MESSAGE_TOO_LARGE)))
    error, _ = produce_with_confluent(proxy.bootstrap_servers, topic_name, b"refused")
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert rule.fired == 1
    error, message = produce_with_confluent(proxy.bootstrap_servers, topic_name, b"stored")
    assert error is None
    assert message.offset() == 0  # the refused record never reached the log


def sample_request(key: int) -> dict[str, Any]:
    """A request of each API ErrorResponse answers, naming partitions 0, 3 (topic a), 1 (b)."""
    topics = [("a", [0, 3]), ("b", [1])]
    txn = {"transactional_id": "t", "producer_id": 7, "producer_epoch": 1}
    commit = [
        {"name": n, "partitions": [{"partition_index": p, "committed_offset": 5} for p in ps]}
        for n, ps in topics
    ]
    fetch = [{"name": n, "partition_indexes": ps} for n, ps in topics]
    group = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    fetched = [
        {"topic": n, "topic_id": None,
         "partitions": [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1024}
                        for p in ps]}
        for n, ps in topics
    ]
    listed = [
        {"name": n, "partitions": [{"partition_index": p, "timestamp": -1} for p in ps]}
        for n, ps in topics
    ]
    return {
        ApiKey.PRODUCE: {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": n, "partition_data": [{"index": p, "records": None} for p in ps]}
                for n, ps in topics
            ],
        },
        ApiKey.INIT_PRODUCER_ID: {"transactional_id": "t", "transaction_timeout_ms": 1000},
        ApiKey.ADD_PARTITIONS_TO_TXN: {
            "v3_and_below_transactional_id": "t",
            "v3_and_below_producer_id": 7,
            "v3_and_below_producer_epoch": 1,
            "v3_and_below_topics": [{"name": n, "partitions": ps} for n, ps in topics],
        },
        ApiKey.ADD_OFFSETS_TO_TXN: {**txn, "group_id": "g"},
        ApiKey.END_TXN: {**txn, "committed": True},
        ApiKey.TXN_OFFSET_COMMIT: {**txn, "group_id": "g", "topics": commit},
        ApiKey.FIND_COORDINATOR: {"key": "g", "coordinator_keys": ["g", "h"]},
        ApiKey.HEARTBEAT: group,
        ApiKey.JOIN_GROUP: {
            "group_id": "g",
            "session_timeout_ms": 10_000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
        ApiKey.SYNC_GROUP: {**group, "assignments": []},
        ApiKey.OFFSET_COMMIT: {"group_id": "g", "member_id": "", "topics": commit},
        ApiKey.OFFSET_FETCH: {
            "group_id": "g",
            "topics": fetch,
            "groups": [{"group_id": "g", "topics": fetch}],
        },
        ApiKey.FETCH: {"max_wait_ms": 100, "min_bytes": 1, "topics": fetched},
        ApiKey.LIST_OFFSETS: {"replica_id": -1, "topics": listed},
        OFFSET_FOR_LEADER_EPOCH: {
            "topics": [
                {"topic": n, "partitions": [{"partition": p, "leader_epoch": 0} for p in ps]}
                for n, ps in topics
            ],
        },
        DELETE_RECORDS: {
            "timeout_ms": 1000,
            "topics": [
                {"name": n, "partitions": [{"partition_index": p, "offset": 5} for p in ps]}
                for n, ps in topics
            ],
        },
        ApiKey.LEAVE_GROUP: {
            "group_id": "g",
            "member_id": "m",
            "members": [{"member_id": "m", "group_instance_id": "i"}],
        },
        ApiKey.DESCRIBE_GROUPS: {"groups": ["g", "h"]},
    }[key]


def build(schema: Any, values: dict[str, Any], **extra: Any) -> Any:
    """A kafka-python message or struct from nested dicts, following its schema."""
    fields = {}
    for name, value in values.items():
        field = schema.fields[name]
        is_structs = field.is_struct_array() and value and isinstance(value[0], dict)
        fields[name] = [build(field, v) for v in value] if is_structs else value
    make = schema if hasattr(schema, "API_KEY") else schema.data_class
    return make(**fields, **extra)


def error_fields(item: Any) -> list[int]:
    """Every value under a key ending in error_code, at any depth of `to_dict()` output."""
    if isinstance(item, list):
        return [code for entry in item for code in error_fields(entry)]
    if not isinstance(item, dict):
        return []
    own = [v for k, v in item.items() if k.endswith("error_code")]
    return own + [code for v in item.values() for code in error_fields(v)]


def partition_indexes(item: Any) -> list[int]:
    if isinstance(item, list):
        return [p for entry in item for p in partition_indexes(entry)]
    if not isinstance(item, dict):
        return []
    own = [v for k, v in item.items() if k in ("index", "partition_index", "partition")]
    return own + [p for v in item.values() for p in partition_indexes(v)]


def expected_partitions(key: int) -> list[int]:
    per_partition = {
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        OFFSET_FOR_LEADER_EPOCH,
        DELETE_RECORDS,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
    }
    return [0, 1, 3] if key in per_partition else []


def versions(key: int) -> range:
    """eosclient's versions of an API it speaks; every version kafka-python has of another."""
    if key in APIS:
        return range(APIS[ApiKey(key)].min_version, APIS[ApiKey(key)].max_version + 1)
    codec = known_api(key)
    assert codec is not None
    return range(codec.request.min_version, codec.request.max_version + 1)


@pytest.mark.parametrize("key", sorted(ERROR_RESPONSE_APIS), ids=api_label)
def test_error_response_mirrors_the_request_at_every_version(key: int) -> None:
    api = known_api(key)
    assert api is not None
    for version in versions(key):
        request = build(api.request, sample_request(key), version=version)
        body = encoded(request, version, 1234)[4:]
        built = error_response(api, version, body, CONCURRENT_TRANSACTIONS)
        wire = encode_response(api, built, version, 1234)
        response = api.response.decode(wire[4:], version=version, header=True)
        assert response.header.correlation_id == 1234
        fields = response.to_dict()
        codes = error_fields(fields)
        assert codes and set(codes) == {CONCURRENT_TRANSACTIONS}, (version, fields)
        assert sorted(partition_indexes(fields)) == expected_partitions(key), version
        if key == ApiKey.FIND_COORDINATOR and version >= 4:
            assert [c["key"] for c in fields["coordinators"]] == ["g", "h"]
        if key == ApiKey.DESCRIBE_GROUPS:
            assert [g["group_id"] for g in fields["groups"]] == ["g", "h"]


def test_rules_that_cannot_be_encoded_are_refused() -> None:
    with pytest.raises(ValueError, match="CreateTopics"):
        Rule(api_key=ApiKey.CREATE_TOPICS, action=ErrorResponse(1))
    with pytest.raises(ValueError, match="api_key"):
        Rule(action=ErrorResponse(1))
    with pytest.raises(ValueError, match="api_key"):
        Rule(action=RewriteError(1))
    with pytest.raises(ValueError, match="outside"):
        Rule(api_key=ApiKey.END_TXN, api_version=99, action=ErrorResponse(1))
    with pytest.raises(ValueError, match="nth"):
        Rule(action=DropResponse(), nth=0)
    with pytest.raises(ValueError, match="direction"):
        Delay(1.0, direction="sideways")  # type: ignore[arg-type]
