"""An asyncio consume-transform-produce service with AsyncExactlyOnceProcessor.

Runs on a broker of its own (noida-db, from the `broker` extra), so it needs nothing else:

    python examples/asyncio_processor.py

The service reads payments read_committed, converts each amount with an async lookup (a coroutine
transform: a call to another service, say), and writes the converted payment; the input offsets
commit in the same transaction as the outputs. To show what that buys, the first instance is
cancelled mid-run (a deploy, a crash: its open transaction is aborted, nothing of it commits), a
second instance with the same ``transactional_id`` picks up from the committed offsets, and the
result is checked: every payment converted exactly once. SIGINT or SIGTERM stop the service
cleanly (``processor.stop()``: commit what is open, then return).
"""

from __future__ import annotations

import asyncio
import json
import signal

from eosclient import ConsumerRecord, TransactionalProducer
from eosclient.aio import AsyncExactlyOnceProcessor
from eosclient.testing.brokers import start_broker
from eosclient.testing.checker import check
from eosclient.testing.topics import create_topic

PAYMENTS, CONVERTED, COUNT = "payments", "payments-eur", 500
RATES = {"USD": 0.92, "GBP": 1.17, "EUR": 1.0}


async def to_eur(record: ConsumerRecord) -> list[tuple[bytes | None, bytes]]:
    """The transform: one payment in, one converted payment out (any number may come out)."""
    payment = json.loads(record.value or b"{}")
    await asyncio.sleep(0.001)  # the rate lookup of a real service
    payment["eur"] = round(payment["amount"] * RATES[payment["currency"]], 2)
    return [(record.key, json.dumps(payment).encode())]


def service(bootstrap: str) -> AsyncExactlyOnceProcessor:
    return AsyncExactlyOnceProcessor(
        bootstrap_servers=bootstrap, input_topics=[PAYMENTS], output_topic=CONVERTED,
        group_id="converter", transactional_id="converter-1",  # stable per instance
        fn=to_eur, max_records_per_transaction=50)


async def main(bootstrap: str) -> None:
    first = service(bootstrap)
    run = asyncio.create_task(first.run(timeout=60))
    while first.stats.records_in < COUNT // 4:  # let it commit a few transactions
        await asyncio.sleep(0.05)
    run.cancel()  # mid-transaction: aborted, clients closed, then CancelledError
    try:
        await run
    except asyncio.CancelledError:
        print("first instance cancelled after", first.stats)

    second = service(bootstrap)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, second.stop)
    stats = await second.run(idle_timeout=3, timeout=60)  # until 3 s without a payment
    print("second instance:", stats)


if __name__ == "__main__":
    with start_broker("noida") as broker:
        create_topic(broker, PAYMENTS, 3)
        create_topic(broker, CONVERTED, 3)
        with TransactionalProducer(broker.bootstrap_servers,
                                   transactional_id="payments-writer") as writer:
            writer.init_transactions(30)
            with writer.transaction():
                for n in range(COUNT):
                    currency = list(RATES)[n % len(RATES)]
                    writer.send(PAYMENTS, json.dumps({"id": n, "amount": n + 0.5,
                                                      "currency": currency}).encode(),
                                key=b"%d" % n)
        asyncio.run(main(broker.bootstrap_servers))
        report = check(broker.bootstrap_servers, PAYMENTS, CONVERTED)
        print(report)
        assert report.ok, "not exactly once"
