"""Fixtures of the fault tests: fault-injecting proxies, started on demand and closed after
the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _proxy_clients import Address

from eosclient.testing.brokers import RunningBroker
from eosclient.testing.proxy import KafkaProxy


@pytest.fixture
def make_proxy() -> Iterator[Callable[..., KafkaProxy]]:
    """A factory of started proxies, all closed after the test."""
    made: list[KafkaProxy] = []

    def make(upstream: Address, **options: Any) -> KafkaProxy:
        made.append(KafkaProxy(upstream.host, upstream.port, **options).start())
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()


@pytest.fixture
def proxy(broker: RunningBroker, make_proxy: Callable[..., KafkaProxy]) -> KafkaProxy:
    return make_proxy(broker)
