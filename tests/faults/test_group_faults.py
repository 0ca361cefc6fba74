"""Consumer groups when an answer is lost between the coordinator and the member.

A coordinator holds a JoinGroup until every member it knows has joined, up to the rebalance
timeout (``max.poll.interval.ms``, 5 minutes by default). An answer that never arrives (a
broker that lost it: noida-db once formed a generation naming a member its leader without
answering that member's JoinGroup) must cost the group about a session timeout, not the
rebalance timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from eosclient import ReadCommittedConsumer
from eosclient.errors import ApiKey
from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import DropResponse, KafkaProxy, Rule
from eosclient.testing.topics import create_topic

SESSION_MS = 6_000
BOUND = 40.0  # well past the session timeout plus margin, far below the 300-s rebalance timeout


@pytest.mark.proxy
def test_a_lost_join_answer_costs_a_session_timeout_not_the_rebalance_timeout(
        broker: RunningBroker, unique_name: Callable[[str], str]) -> None:
    topic = create_topic(broker, unique_name("t"), 2)
    with KafkaProxy(broker.host, broker.port) as proxy:
        # A static member: its first JoinGroup is the one the coordinator answers with a
        # generation (a dynamic member's first is refused with a member id, KIP-394).
        rule = proxy.add_rule(Rule(api_key=ApiKey.JOIN_GROUP, nth=1, action=DropResponse()))
        with ReadCommittedConsumer(proxy.bootstrap_servers, group_id=unique_name("g"),
                                   config={"group.instance.id": unique_name("i"),
                                           "session.timeout.ms": SESSION_MS,
                                           "heartbeat.interval.ms": 500}) as consumer:
            consumer.subscribe([topic])
            started = time.monotonic()
            while not consumer.assignment() and time.monotonic() - started < BOUND:
                consumer.poll(0.5)
            took = time.monotonic() - started
            assert rule.fired == 1
            assert len(consumer.assignment()) == 2, f"no assignment after {took:.0f} s"
    joins = [seen for seen in proxy.seen if seen.api_key == ApiKey.JOIN_GROUP]
    assert len(joins) >= 2  # the lost one, and the one sent again
