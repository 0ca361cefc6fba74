"""The fake coordinator and the driver of the transaction core's sans-IO tests (test_txn*.py).

`Broker` answers requests the way a coordinator would; `Driver` holds one TransactionCore, the
clock and the accumulator's "incomplete batches" flag, and walks the core through a
conversation with the broker."""

from __future__ import annotations

from typing import Any

from eosclient._core.txn import (
    FailUnsent,
    Node,
    SendRequest,
    SequencesReset,
    State,
    TopicPartition,
    TransactionCore,
)
from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey, error_for

TXN = "orders-1"
TP0, TP1, TP2 = TopicPartition("out", 0), TopicPartition("out", 1), TopicPartition("out", 2)
IN0 = TopicPartition("in", 0)
FIND, INIT = ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID
ADD_PARTS, ADD_OFFS = ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN
OFFSETS, END = ApiKey.TXN_OFFSET_COMMIT, ApiKey.END_TXN


def api_of(send: SendRequest) -> ApiKey:
    return ApiKey(send.request.API_KEY)


class Broker:
    """Answers the core's requests the way a coordinator would (same producer id, epoch + 1)."""

    def __init__(self) -> None:
        self.node = Node(1, "broker-1", 9092)
        self.producer_id, self.epoch = 4000, -1

    def response(self, send: SendRequest, code: int = 0, **fields: Any) -> Any:
        request, api = send.request, api_of(send)
        cls = APIS[api].response
        if api is FIND:
            node = fields.pop("node", self.node)
            return cls(error_code=code, node_id=node.node_id, host=node.host, port=node.port)
        if api is INIT:
            if code == 0:
                self.epoch += 1
            return cls(error_code=code, producer_id=self.producer_id, producer_epoch=self.epoch)
        if api is ADD_PARTS:
            return cls(results_by_topic_v3_and_below=[
                cls.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                    cls.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=code) for p in t.partitions])
                for t in request.v3_and_below_topics])
        if api is OFFSETS:
            topic = cls.TxnOffsetCommitResponseTopic
            return cls(topics=[topic(name=t.name, partitions=[
                topic.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                       error_code=code)
                for p in t.partitions]) for t in request.topics])
        return cls(error_code=code, **fields)


class Driver:
    """Drives one TransactionCore through a conversation with a fake Broker."""

    def __init__(self, transactional_id: str | None = TXN, **settings: Any) -> None:
        self.core = TransactionCore(transactional_id=transactional_id, **settings)
        self.broker = Broker()
        self.now = 0.0
        self.batches = False  # the accumulator's "incomplete batches" flag
        self.events: list[FailUnsent | SequencesReset] = []

    def poll(self) -> list[SendRequest]:
        sends = []
        for out in self.core.poll(self.now, incomplete_batches=self.batches):
            if isinstance(out, SendRequest):
                sends.append(out)
            else:
                self.events.append(out)
        return sends

    def expect(self, *apis: ApiKey) -> list[SendRequest]:
        sends = self.poll()
        assert [api_of(s) for s in sends] == list(apis)
        return sends

    def respond(self, send: SendRequest, code: int = 0, **fields: Any) -> None:
        self.core.on_response(send.request, self.broker.response(send, code, **fields), self.now)

    def run(self, api: ApiKey, code: int = 0, **fields: Any) -> SendRequest:
        (send,) = self.expect(api)
        self.respond(send, code, **fields)
        return send

    def ready(self) -> Driver:
        self.core.init(self.now, self.now + 30)
        if self.core.transactional:
            self.run(FIND)
        self.run(INIT)
        return self

    def in_txn(self, *tps: TopicPartition) -> Driver:
        """READY, then begin and lazily register ``tps``."""
        if self.core.state is State.UNINITIALIZED:
            self.ready()
        self.core.begin(self.now)
        if tps:
            self.core.add_partitions(tps)
            self.run(ADD_PARTS)
        return self

    def produce_error(self, code: int) -> None:
        error = error_for(ApiKey.PRODUCE, code)
        self.core.on_produce_error(error, self.core.identity, self.core.generation, self.now)

