"""`DropResponse`, `Cut`, `RewriteError` and `Delay` seen taking effect, and which requests a
rule matches (nth, times, api_version)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from _proxy_clients import (
    CONCURRENT_TRANSACTIONS,
    MESSAGE_TOO_LARGE,
    TIMEOUT,
    TXN_TIMEOUT_MS,
    UNSUPPORTED_VERSION,
    RawSocket,
    broker_epoch,
    encoded,
    init_producer_id,
    produce_with_confluent,
    raw_exchange,
    read_values,
    txn_id,
    wait_for,
)
from confluent_kafka import KafkaError
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest

from eosclient._net.blocking import BlockingConnection
from eosclient._protocol.apis import api_for
from eosclient.errors import ApiKey, KafkaConnectionError, KafkaTimeoutError
from eosclient.testing._proxy_rules import decode_response
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import (
    Cut,
    Delay,
    DropResponse,
    ErrorResponse,
    KafkaProxy,
    RewriteError,
    Rule,
)

pytestmark = pytest.mark.proxy


# --- DropResponse, Cut, RewriteError ----------------------------------------------------------


def test_drop_response_lets_the_broker_act_and_the_client_time_out(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=DropResponse()))
    txn = txn_id()
    with pytest.raises(KafkaTimeoutError):
        init_producer_id(proxy, txn, timeout=1.0)
    assert rule.fired == 1
    assert broker_epoch(broker, txn) == 1  # the dropped InitProducerId got epoch 0


def test_responses_after_a_dropped_one_still_arrive_in_order(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=DropResponse()))
    init = InitProducerIdRequest(transactional_id=txn_id(), transaction_timeout_ms=TXN_TIMEOUT_MS)
    raw = RawSocket(proxy)
    try:
        raw.sock.sendall(
            encoded(MetadataRequest(topics=[]), 1, 1)
            + encoded(init, 3, 2)
            + encoded(MetadataRequest(topics=[]), 1, 3)
        )
        ids = [int.from_bytes(raw.read_frame()[:4], "big") for _ in range(2)]
    finally:
        raw.close()
    assert ids == [1, 3]


def test_a_local_answer_waits_for_the_responses_before_it(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    # The ErrorResponse is ready at once; the Metadata answer before it is held 0.2 s.
    proxy.add_rule(Rule(api_key=ApiKey.METADATA, action=Delay(0.2, "response")))
    proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=ErrorResponse(1)))
    init = InitProducerIdRequest(transactional_id=txn_id(), transaction_timeout_ms=TXN_TIMEOUT_MS)
    raw = RawSocket(proxy)
    try:
        raw.sock.sendall(encoded(MetadataRequest(topics=[]), 1, 1) + encoded(init, 3, 2))
        ids = [int.from_bytes(raw.read_frame()[:4], "big") for _ in range(2)]
    finally:
        raw.close()
    assert ids == [1, 2]


@pytest.mark.parametrize(("when", "epoch_after"), [("before", 0), ("after", 1)])
def test_cut_closes_the_connection_before_or_after_the_broker_acts(
    broker: RunningBroker, proxy: KafkaProxy, when: Any, epoch_after: int
) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, action=Cut(when)))
    txn = txn_id()
    with pytest.raises(KafkaConnectionError):
        init_producer_id(proxy, txn)
    assert rule.fired == 1
    assert broker_epoch(broker, txn) == epoch_after
    assert wait_for(lambda: proxy.connections == 0)


def test_rewrite_error_hides_a_stored_record_from_the_producer(
    broker: RunningBroker, proxy: KafkaProxy, topic_name: str
) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.PRODUCE, action=RewriteError(MESSAGE_TOO_LARGE)))
    error, _ = produce_with_confluent(proxy.bootstrap_servers, topic_name, b"stored anyway")
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert rule.fired == 1
    assert read_values(broker.bootstrap_servers, topic_name, 1) == [b"stored anyway"]


def test_rewrite_error_on_api_versions_sends_a_v0_body(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    proxy.add_rule(Rule(api_key=ApiKey.API_VERSIONS, action=RewriteError(UNSUPPORTED_VERSION)))
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    api = api_for(ApiKey.API_VERSIONS)
    response = decode_response(api, 3, raw_exchange(proxy, request, 3))
    assert response.error_code == UNSUPPORTED_VERSION
    assert response.version == 0
    assert ApiKey.PRODUCE in {entry.api_key for entry in response.api_keys}


# --- rule matching -----------------------------------------------------------------------


def init_codes(proxy: KafkaProxy, count: int, version: int | None = None) -> list[int]:
    return [init_producer_id(proxy, txn_id(), version=version).error_code for _ in range(count)]


def test_nth_fires_on_that_request_only(broker: RunningBroker, proxy: KafkaProxy) -> None:
    rule = proxy.add_rule(
        Rule(
            api_key=ApiKey.INIT_PRODUCER_ID,
            nth=2,
            times=None,
            action=ErrorResponse(CONCURRENT_TRANSACTIONS),
        )
    )
    assert init_codes(proxy, 4) == [0, CONCURRENT_TRANSACTIONS, 0, 0]
    assert (rule.matched, rule.fired) == (4, 1)


def test_times_limits_firings_and_none_never_stops(
    broker: RunningBroker, proxy: KafkaProxy
) -> None:
    code = CONCURRENT_TRANSACTIONS
    twice = proxy.add_rule(Rule(api_key=ApiKey.INIT_PRODUCER_ID, times=2, action=ErrorResponse(1)))
    forever = proxy.add_rule(
        Rule(api_key=ApiKey.INIT_PRODUCER_ID, times=None, action=ErrorResponse(code))
    )
    # The first rule added acts; once it is spent, the next one takes over for good.
    assert init_codes(proxy, 6) == [1, 1, code, code, code, code]
    assert (twice.fired, forever.fired) == (2, 4)
    assert proxy.wait_fired(forever, timeout=0.0, count=4)
    assert not proxy.wait_fired(forever, timeout=0.01, count=5)
    proxy.clear_rules()
    assert init_codes(proxy, 1) == [0]


def test_api_version_filter(broker: RunningBroker, proxy: KafkaProxy) -> None:
    rule = proxy.add_rule(
        Rule(
            api_key=ApiKey.INIT_PRODUCER_ID,
            api_version=4,
            times=None,
            action=ErrorResponse(CONCURRENT_TRANSACTIONS),
        )
    )
    assert init_codes(proxy, 1, version=3) == [0]
    assert init_codes(proxy, 1, version=4) == [CONCURRENT_TRANSACTIONS]
    assert (rule.matched, rule.fired) == (1, 1)


@pytest.mark.parametrize("direction", ["request", "response"])
def test_delay_holds_the_exchange(broker: RunningBroker, proxy: KafkaProxy, direction: Any) -> None:
    rule = proxy.add_rule(Rule(api_key=ApiKey.METADATA, action=Delay(0.3, direction)))
    with BlockingConnection(proxy.host, proxy.port, timeout=TIMEOUT) as conn:
        started = time.monotonic()
        conn.request(MetadataRequest(topics=[]))
        elapsed = time.monotonic() - started
    assert rule.fired == 1
    assert elapsed >= 0.3
