"""Commit one transaction, abort another, and read back what a read_committed reader sees.

Runs on a broker of its own (noida-db, from the `broker` extra), so it needs nothing else:

    python examples/producer_quickstart.py
"""

from __future__ import annotations

from eosclient import TopicPartition, TransactionalProducer
from eosclient.testing.brokers import start_broker
from eosclient.testing.reader import read_partition


def main() -> None:
    with start_broker("noida") as broker:
        bootstrap = broker.bootstrap_servers
        with TransactionalProducer(bootstrap, transactional_id="orders-1") as producer:
            producer.init_transactions(timeout=30)  # fences any older instance of "orders-1"

            # Commits on success, aborts on any exception (and re-raises).
            with producer.transaction(partitions=[TopicPartition("orders", 0)]):
                producer.send("orders", b"v1", key=b"k", partition=0)
                producer.send_batch("orders", [b"v2", b"v3"], partition=0)

            producer.begin_transaction()
            producer.send("orders", b"never seen by read_committed readers", partition=0)
            producer.abort_transaction(timeout=30)

        seen = [record.value for record in read_partition(bootstrap, "orders", 0)]
        print("read_committed sees:", seen)
        assert seen == [b"v1", b"v2", b"v3"], seen


if __name__ == "__main__":
    main()
