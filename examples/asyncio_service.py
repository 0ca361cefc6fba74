"""eosclient in an asyncio service: a transaction per request, and consume-transform-produce.

Runs on a broker of its own (noida-db, from the `broker` extra), so it needs nothing else:

    python examples/asyncio_service.py

1. ``handle_order`` is what a web handler (FastAPI, aiohttp, ...) would call for each request:
   one transaction writes the order and its audit record, atomically. One producer serves every
   request; its transactions run one at a time (an ``asyncio.Lock``), each one short.
2. ``enrich`` is a consume-transform-produce service: it reads the orders read_committed, writes
   an enriched record per order and commits the input offsets in the same transaction
   (``send_offsets_to_transaction`` with the consumer's group metadata), so each order is
   enriched exactly once even if the service is killed and restarted at any point.
"""

from __future__ import annotations

import asyncio
import json

from eosclient import TopicPartition
from eosclient.aio import AsyncReadCommittedConsumer, AsyncTransactionalProducer
from eosclient.testing.brokers import start_broker
from eosclient.testing.reader import read_partition
from eosclient.testing.topics import create_topic

ORDERS, AUDIT, ENRICHED = "orders", "audit", "orders-enriched"


class OrderService:
    """The request side: one transactional producer shared by every request."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = AsyncTransactionalProducer(bootstrap, transactional_id="order-api-1")
        self._one_at_a_time = asyncio.Lock()

    async def start(self) -> None:
        await self.producer.start()
        await self.producer.init_transactions(timeout=30)  # fences an older "order-api-1"

    async def handle_order(self, order_id: int, amount: int) -> None:
        """One request: the order and its audit record commit together, or neither does."""
        async with self._one_at_a_time, self.producer.transaction(timeout=30):
            body = json.dumps({"id": order_id, "amount": amount}).encode()
            await self.producer.send(ORDERS, body, key=b"%d" % order_id, partition=0)
            await self.producer.send(AUDIT, b"order %d accepted" % order_id, partition=0)
            if amount < 0:  # the block aborts on any exception: nothing of it is read
                raise ValueError(f"order {order_id}: negative amount")

    async def close(self) -> None:
        await self.producer.close()


async def enrich(bootstrap: str, count: int) -> None:
    """Consume orders, write enriched ones, commit the offsets in the same transaction."""
    source = TopicPartition(ORDERS, 0)
    async with AsyncReadCommittedConsumer(
            bootstrap, group_id="enricher", auto_offset_reset="earliest") as consumer, \
            AsyncTransactionalProducer(bootstrap, transactional_id="enricher-1") as producer:
        consumer.assign([source])  # subscribe([ORDERS]) for a group of several instances
        await producer.init_transactions(timeout=30)
        done = 0
        while done < count:
            records = await consumer.poll(timeout=5.0)
            if not records:
                continue
            async with producer.transaction(group_id="enricher", timeout=30):
                for record in records:
                    order = json.loads(record.value or b"{}")
                    order["vat"] = round(order["amount"] * 0.2, 2)
                    await producer.send(ENRICHED, json.dumps(order).encode(), partition=0)
                producer.send_offsets_to_transaction(
                    {source: await consumer.position(source)}, consumer.group_metadata())
            done += len(records)


async def main(bootstrap: str) -> None:
    service = OrderService(bootstrap)
    await service.start()
    requests = [service.handle_order(n, amount) for n, amount in
                enumerate([10, 25, -1, 40])]  # order 2 fails: its transaction aborts
    results = await asyncio.gather(*requests, return_exceptions=True)
    print("requests:", [type(r).__name__ if r else "ok" for r in results])
    await service.close()
    await enrich(bootstrap, count=3)


if __name__ == "__main__":
    with start_broker("noida") as broker:
        for topic in (ORDERS, AUDIT, ENRICHED):
            create_topic(broker, topic, 1)
        asyncio.run(main(broker.bootstrap_servers))
        enriched = [json.loads(r.value or b"")
                    for r in read_partition(broker.bootstrap_servers, ENRICHED, 0)]
        print("enriched:", enriched)
        assert [o["id"] for o in enriched] == [0, 1, 3], enriched
        audit = read_partition(broker.bootstrap_servers, AUDIT, 0)
        assert len(audit) == 3, audit  # the failed order's audit record was aborted with it
