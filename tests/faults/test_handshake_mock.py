"""The wire adapter's handshake against librdkafka's mock cluster, which speaks ApiVersions v0-v2
only and answers v3 with a body no schema reads."""

from __future__ import annotations

import pytest

from eosclient._net.blocking import BlockingConnection
from eosclient.errors import ApiKey
from eosclient.testing.mock import MockCluster

pytestmark = pytest.mark.mock


def test_handshake_falls_back_and_negotiates() -> None:
    # Used to fail with ProtocolError: the UNSUPPORTED_VERSION answer was undecodable.
    with MockCluster(1) as cluster:
        host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
        with BlockingConnection(host, int(port), timeout=10) as conn:
            versions = conn.protocol.versions
            assert versions is not None
            assert versions.broker[ApiKey.API_VERSIONS][1] < 3
            assert versions.supports(ApiKey.INIT_PRODUCER_ID)
            assert versions.supports(ApiKey.PRODUCE, 3)
