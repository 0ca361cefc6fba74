"""The admin client: topics, consumer groups with their lag, offsets, and transactions (KIP-664).

Theory of operation
-------------------
:class:`Admin` runs one I/O thread over the same network client the producer and consumer use
(:mod:`eosclient._admin.runner`), so connections, TLS, SASL, reconnect backoff and version
negotiation are theirs. Each call is a short conversation driven from the caller's thread:
Metadata or FindCoordinator first where the request must go to a partition's leader or a
coordinator, then the request itself. A retriable error (a moved coordinator, a leader
election, a cut connection, CONCURRENT_TRANSACTIONS) runs the conversation again after the
backoff; every call has one deadline (``timeout``, default ``default.api.timeout.ms``) for all
its requests and retries, and raises :class:`~eosclient.errors.KafkaTimeoutError` when it passes.

Lag is measured against the last stable offset (the LSO), where read_committed readers end; the
end of a partition is read from a Fetch answer, as the consumer reads it, because Tansu answers
ListOffsets(latest) wrongly while a transaction is open (:mod:`eosclient._consumer.lookups`).

Transactions (KIP-664): :meth:`Admin.list_transactions`, :meth:`Admin.describe_transactions`,
:meth:`Admin.describe_producers` and :meth:`Admin.find_hanging_transactions` read; two calls
end a transaction:

* :meth:`Admin.abort_transaction` writes an ABORT marker into one partition with
  WriteTxnMarkers, sent to the partition's leader, as Kafka's admin does for KIP-664. It needs
  the producer id, epoch and coordinator epoch (DescribeProducers gives them), and works even
  when no coordinator knows the transaction.
* :meth:`Admin.force_terminate_transaction` sends InitProducerId for the transactional id to its
  coordinator (Kafka 4.0's ``forceTerminateTransaction``, KIP-939): the coordinator aborts the
  id's open transaction and bumps its epoch, so the producer that held it is fenced.

A broker that does not advertise an API answers nothing: the call raises
:class:`~eosclient.errors.UnsupportedVersionError` naming the API at once, and never sends it
(Tansu advertises none of the KIP-664 APIs nor WriteTxnMarkers; noida-db advertises
ListTransactions, DescribeTransactions and DescribeProducers, not WriteTxnMarkers).
"""

from __future__ import annotations

import functools
import logging
import ssl
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from eosclient._admin import wire
from eosclient._admin.hanging import OPEN_STATES, find_hanging
from eosclient._admin.runner import AdminRunner, Call
from eosclient._admin.types import (
    GroupDescription,
    GroupListing,
    HangingTransaction,
    MemberDescription,
    PartitionInfo,
    PartitionLag,
    ProducerState,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
)
from eosclient._args import timeout_of
from eosclient._consumer.lookups import OffsetQuery, Watermarks
from eosclient._consumer.protocol import (
    CONSUMER_PROTOCOL,
    read_assignment,
    read_coordinator,
    read_list_offsets,
    read_offset_fetch,
)
from eosclient._consumer.protocol import list_offsets as list_offsets_request
from eosclient._core.types import TopicPartition
from eosclient._net.backoff import Backoff
from eosclient._net.client import NetworkClient
from eosclient.config import AdminConfig, build
from eosclient.errors import (
    AllBrokersDownError,
    ApiKey,
    EosError,
    KafkaTimeoutError,
    ProtocolError,
    RetriableError,
    error_for,
    error_for_codes,
    is_success,
)

__all__ = [
    "Admin",
    "GroupDescription",
    "GroupListing",
    "HangingTransaction",
    "MemberDescription",
    "PartitionInfo",
    "PartitionLag",
    "ProducerState",
    "TopicDescription",
    "TransactionDescription",
    "TransactionListing",
]

log = logging.getLogger("eosclient.admin")

_T = TypeVar("_T")
_EARLIEST: Final = "earliest"
_LATEST: Final = "latest"
_READ_COMMITTED: Final = 1
_NO_LEADER: Final = -1
_UNKNOWN_TOPIC: Final = 3
_TOPIC_ALREADY_EXISTS: Final = 36
_TRANSACTIONAL_ID_NOT_FOUND: Final = 105
_CLOSE_WAIT: Final = 5.0
_DEFAULT_MAX_OPEN_MS: Final = 15 * 60 * 1000  # Kafka's transaction.max.timeout.ms default
# The id's transaction timeout until its producer initialises again with its own (Java's
# transaction.timeout.ms default).
_TERMINATE_TXN_TIMEOUT_MS: Final = 60_000


class Admin:
    """Administer a Kafka cluster: topics, groups and their lag, offsets, transactions.

    Every call blocks for at most ``timeout`` seconds (default ``default.api.timeout.ms``) and
    raises :class:`~eosclient.errors.KafkaTimeoutError` when it passes. A refusal by the broker
    raises the error its code maps to (:mod:`eosclient.errors`), with the topic, group or id in
    the message. An API the broker does not support raises
    :class:`~eosclient.errors.UnsupportedVersionError` naming it, without waiting.

    Args:
        bootstrap_servers: ``"host:port,host:port"`` or a list of ``"host:port"``.
        client_id: ``client.id``.
        security_protocol: ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.
        ssl_context: An :class:`ssl.SSLContext` used as it is (instead of ``ssl.*`` keys).
        sasl_mechanism: ``sasl.mechanism``.
        sasl_username: ``sasl.username``.
        sasl_password: ``sasl.password``.
        config: Any setting by Kafka's dotted key, or a whole
            :class:`~eosclient.config.AdminConfig` (then pass no other setting).

    Raises:
        ConfigError: a bad setting; nothing was started.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str] | None = None, *,
                 client_id: str | None = None, security_protocol: str | None = None,
                 ssl_context: ssl.SSLContext | None = None, sasl_mechanism: str | None = None,
                 sasl_username: str | None = None, sasl_password: str | None = None,
                 config: Mapping[str, object] | AdminConfig | None = None) -> None:
        given = {k: v for k, v in locals().items() if k not in ("self", "config")}
        self.config = cfg = build(AdminConfig, given, config)
        self._backoff = Backoff(cfg.retry_backoff_ms / 1000, cfg.retry_backoff_max_ms / 1000)
        client = NetworkClient(cfg, auto_create_topics=False)
        self._runner = runner = AdminRunner(client, f"eosclient-admin-{cfg.client_id}")
        runner.start()
        self._finalizer = weakref.finalize(self, runner.close, _CLOSE_WAIT)

    # -- topics ---------------------------------------------------------------------------------

    def list_topics(self, *, internal: bool = False, timeout: float | None = None) -> list[str]:
        """The names of the cluster's topics, sorted (internal ones only if ``internal``)."""
        deadline = self._deadline(timeout)
        response = self._retrying("Metadata", deadline,
                                  functools.partial(self._metadata, None, deadline))
        return sorted(t.name for t in response.topics
                      if is_success(ApiKey.METADATA, t.error_code)
                      and (internal or not t.is_internal))

    def describe_topics(self, topics: Iterable[str], *,
                        timeout: float | None = None) -> list[TopicDescription]:
        """Each topic's partitions, leaders and replicas, in the order asked.

        Raises:
            EosError: a topic does not exist (UNKNOWN_TOPIC_OR_PARTITION, naming it).
        """
        names = _names(topics)
        deadline = self._deadline(timeout)
        return self._retrying("Metadata", deadline,
                              functools.partial(self._describe_topics, names, deadline))

    def create_topic(self, name: str, partitions: int = 1, *, replication_factor: int = 1,
                     config: Mapping[str, str] | None = None, if_not_exists: bool = False,
                     timeout: float | None = None) -> bool:
        """Create a topic.

        Args:
            if_not_exists: A topic of that name that exists already is not an error (as the
                CLI's ``--if-not-exists``); it is left as it is, whatever its partitions.

        Returns:
            True when the topic was created, False when it existed (``if_not_exists``).

        Raises:
            EosError: the broker refused (TOPIC_ALREADY_EXISTS without ``if_not_exists``,
                INVALID_PARTITIONS, ...).
            ValueError: ``partitions`` or ``replication_factor`` below 1.
        """
        if partitions < 1 or replication_factor < 1:
            raise ValueError("partitions and replication_factor must be at least 1")
        deadline = self._deadline(timeout)
        request = wire.create_topic(_names([name])[0], partitions, replication_factor,
                                    dict(config or {}), _ms_left(deadline))

        def attempt() -> bool:
            response = self._request(None, request, deadline, "CreateTopics")
            for topic in response.topics:
                if if_not_exists and topic.error_code == _TOPIC_ALREADY_EXISTS:
                    return False
                if not is_success(ApiKey.CREATE_TOPICS, topic.error_code):
                    raise error_for(ApiKey.CREATE_TOPICS, topic.error_code,
                                    _detail(f"creating topic {name!r}", topic.error_message))
            return True

        return self._retrying("CreateTopics", deadline, attempt)

    def delete_topic(self, name: str, *, timeout: float | None = None) -> None:
        """Delete a topic.

        Raises:
            EosError: the broker refused (UNKNOWN_TOPIC_OR_PARTITION for a topic that does not
                exist).
        """
        deadline = self._deadline(timeout)
        request = wire.delete_topics(_names([name]), _ms_left(deadline))

        def attempt() -> None:
            response = self._request(None, request, deadline, "DeleteTopics")
            for topic in response.responses:
                if not is_success(ApiKey.DELETE_TOPICS, topic.error_code):
                    error = error_for(ApiKey.DELETE_TOPICS, topic.error_code,
                                      _detail(f"deleting topic {name!r}", topic.error_message))
                    if topic.error_code == _UNKNOWN_TOPIC:
                        raise _final(error)  # not retried: it will not appear
                    raise error

        self._retrying("DeleteTopics", deadline, attempt)

    # -- offsets --------------------------------------------------------------------------------

    def list_offsets(self, partitions: Iterable[TopicPartition], spec: str | int = _LATEST, *,
                     isolation_level: str = "read_committed",
                     timeout: float | None = None) -> dict[TopicPartition, int | None]:
        """Offsets of some partitions: ``"earliest"`` (the log start), ``"latest"`` (the end:
        the LSO under read_committed, the high watermark under read_uncommitted), or an int:
        the first offset whose timestamp is at or after it (epoch milliseconds; None where no
        record is that recent).

        Raises:
            ValueError: an unknown ``spec`` or isolation level.
        """
        tps = _partitions(partitions)
        isolation = _isolation(isolation_level)
        deadline = self._deadline(timeout)
        if spec in (_EARLIEST, _LATEST):
            ends = self._ends(tps, deadline, want_end=spec == _LATEST, isolation=isolation)
            return {tp: (ends[tp].log_start_offset if spec == _EARLIEST else
                         ends[tp].last_stable_offset if isolation else ends[tp].high_watermark)
                    for tp in tps}
        if isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
            raise ValueError(f"spec must be 'earliest', 'latest' or a timestamp in ms >= 0, "
                             f"got {spec!r}")
        return self._retrying("ListOffsets", deadline,
                              lambda: self._offsets_for_time(tps, spec, isolation, deadline))

    # -- groups ---------------------------------------------------------------------------------

    def list_groups(self, *, timeout: float | None = None) -> list[GroupListing]:
        """Every group every broker coordinates, sorted by id."""
        deadline = self._deadline(timeout)

        def attempt() -> list[GroupListing]:
            found: dict[str, GroupListing] = {}
            for node, response in self._to_every_broker(wire.list_groups, deadline,
                                                        "ListGroups"):
                if not is_success(ApiKey.LIST_GROUPS, response.error_code):
                    raise error_for(ApiKey.LIST_GROUPS, response.error_code, f"node {node}")
                for g in response.groups:
                    found[g.group_id] = GroupListing(g.group_id, g.protocol_type or "",
                                                     getattr(g, "group_state", "") or "")
            return [found[k] for k in sorted(found)]

        return self._retrying("ListGroups", deadline, attempt)

    def describe_group(self, group_id: str, *,
                       timeout: float | None = None) -> GroupDescription:
        """A group's state and members, and its committed offsets with their lag against the
        LSO (offsets read with ``require_stable``: an offset committed inside an open
        transaction waits for it to end)."""
        (group_id,) = _names([group_id])
        deadline = self._deadline(timeout)

        def attempt() -> tuple[Any, dict[TopicPartition, int]]:
            node = self._coordinator(group_id, wire.GROUP, deadline)
            described = self._request(node, wire.describe_groups([group_id]), deadline,
                                      "DescribeGroups").groups[0]
            if not is_success(ApiKey.DESCRIBE_GROUPS, described.error_code):
                raise error_for(ApiKey.DESCRIBE_GROUPS, described.error_code,
                                f"group {group_id!r}")
            fetched = self._request(node, wire.offset_fetch_all(group_id), deadline,
                                    "OffsetFetch")
            group_code, answers = read_offset_fetch(fetched)
            error = error_for_codes(ApiKey.OFFSET_FETCH,
                                    [group_code, *(a.error_code for a in answers.values())])
            if error is not None:
                raise error
            return described, {tp: a.offset for tp, a in answers.items()
                               if a.offset is not None}

        described, committed = self._retrying("DescribeGroup", deadline, attempt)
        ends = self._ends(list(committed), deadline, want_end=True, isolation=_READ_COMMITTED)
        offsets = {tp: PartitionLag(offset, ends[tp].last_stable_offset,
                                    max(0, ends[tp].last_stable_offset - offset))
                   for tp, offset in sorted(committed.items())}
        members = tuple(_member(m, described.protocol_type) for m in described.members)
        return GroupDescription(group_id, described.group_state, described.protocol_type or "",
                                described.protocol_data or "", members, offsets)

    # -- transactions (KIP-664) -----------------------------------------------------------------

    def list_transactions(self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          timeout: float | None = None) -> list[TransactionListing]:
        """Every transactional id every coordinator knows, sorted (optionally only those in
        ``states``, Kafka's spelling: Ongoing, CompleteCommit, ...; or of ``producer_ids``).

        Raises:
            UnsupportedVersionError: a broker lacks ListTransactions.
        """
        deadline = self._deadline(timeout)
        wanted, pids = list(states), list(producer_ids)

        def attempt() -> list[TransactionListing]:
            found: list[TransactionListing] = []
            request = functools.partial(wire.list_transactions, wanted, pids, -1)
            for node, response in self._to_every_broker(request, deadline, "ListTransactions"):
                if not is_success(ApiKey.LIST_TRANSACTIONS, response.error_code):
                    raise error_for(ApiKey.LIST_TRANSACTIONS, response.error_code,
                                    f"node {node}")
                found += [TransactionListing(t.transactional_id, t.producer_id,
                                             t.transaction_state, node)
                          for t in response.transaction_states]
            return sorted(found, key=lambda t: t.transactional_id)

        return self._retrying("ListTransactions", deadline, attempt)

    def describe_transactions(self, transactional_ids: Iterable[str], *,
                              timeout: float | None = None) -> list[TransactionDescription]:
        """Each transactional id's current transaction, as its coordinator describes it, in
        the order asked.

        Raises:
            UnsupportedVersionError: the coordinator lacks DescribeTransactions.
            EosError: an id the coordinator does not know (TRANSACTIONAL_ID_NOT_FOUND, naming it).
        """
        ids = _names(transactional_ids)
        deadline = self._deadline(timeout)
        return [self._retrying("DescribeTransactions", deadline,
                               functools.partial(self._describe_one, txn_id, deadline))
                for txn_id in ids]

    def describe_producers(self, partitions: Iterable[TopicPartition], *,
                           timeout: float | None = None,
                           ) -> dict[TopicPartition, list[ProducerState]]:
        """The active producers each partition's leader knows, with their open transaction's
        first offset (KIP-664).

        Raises:
            UnsupportedVersionError: a leader lacks DescribeProducers.
        """
        tps = _partitions(partitions)
        deadline = self._deadline(timeout)
        return self._retrying("DescribeProducers", deadline,
                              lambda: self._describe_producers(tps, deadline))

    def find_hanging_transactions(self, *, max_open_ms: int = _DEFAULT_MAX_OPEN_MS,
                                  topics: Iterable[str] | None = None,
                                  timeout: float | None = None) -> list[HangingTransaction]:
        """Transactions open longer than ``max_open_ms``, and transactions open in a partition
        that no coordinator lists as open there (see :mod:`eosclient._admin.hanging`).

        Args:
            max_open_ms: The bound of the first rule (default 15 minutes, Kafka's
                ``transaction.max.timeout.ms``).
            topics: Only transactions in these topics' partitions (default: every topic).

        Raises:
            UnsupportedVersionError: a broker lacks ListTransactions, DescribeTransactions or
                DescribeProducers.
        """
        deadline = self._deadline(timeout)
        names = None if topics is None else _names(topics)
        listed = self.list_transactions(timeout=_left(deadline))
        described = []
        for txn in listed:
            if txn.state not in OPEN_STATES:
                continue
            try:
                described.append(self._retrying("DescribeTransactions", deadline,
                                                functools.partial(self._describe_one,
                                                                  txn.transactional_id,
                                                                  deadline)))
            except EosError as exc:
                if exc.code != _TRANSACTIONAL_ID_NOT_FOUND:
                    raise  # else it ended (and expired) since it was listed
        if names is not None:  # only transactions in these topics
            described = [d for d in described if any(tp.topic in names for tp in d.partitions)]
        descriptions = self.describe_topics(names if names is not None else
                                            self.list_topics(timeout=_left(deadline)),
                                            timeout=_left(deadline))
        tps = [TopicPartition(d.name, p.partition) for d in descriptions for p in d.partitions]
        producers = self.describe_producers(tps, timeout=_left(deadline)) if tps else {}
        return find_hanging(described, producers, now_ms=int(time.time() * 1000),
                            max_open_ms=max_open_ms)

    def abort_transaction(self, partition: TopicPartition, producer_id: int,
                          producer_epoch: int, coordinator_epoch: int, *,
                          timeout: float | None = None) -> None:
        """Write an ABORT marker for ``producer_id``'s open transaction into ``partition``
        (WriteTxnMarkers to its leader, KIP-664); read_committed readers then skip its records
        and the LSO moves past it.

        Raises:
            UnsupportedVersionError: the leader lacks WriteTxnMarkers (noida-db and Tansu both
                do): use :meth:`force_terminate_transaction` with the transactional id.
        """
        (tp,) = _partitions([partition])
        deadline = self._deadline(timeout)
        request = wire.write_abort_marker(tp, producer_id, producer_epoch, coordinator_epoch)

        def attempt() -> None:
            leader = self._leaders([tp], deadline)[tp]
            response = self._request(leader, request, deadline, "WriteTxnMarkers")
            codes = [p.error_code for m in response.markers for t in m.topics
                     for p in t.partitions]
            error = error_for_codes(ApiKey.WRITE_TXN_MARKERS, codes)
            if error is not None:
                raise error

        self._retrying("WriteTxnMarkers", deadline, attempt)

    def force_terminate_transaction(self, transactional_id: str, *,
                                    timeout: float | None = None) -> None:
        """Abort ``transactional_id``'s open transaction and fence the producer that holds it
        (InitProducerId to its coordinator, as Kafka 4.0's ``forceTerminateTransaction``).

        The producer id's epoch is bumped: the old producer's next request fails as fenced,
        and a new producer with the same id starts clean. A transaction already ending
        (CONCURRENT_TRANSACTIONS) is waited for.
        """
        (txn_id,) = _names([transactional_id])
        deadline = self._deadline(timeout)

        def attempt() -> None:
            node = self._coordinator(txn_id, wire.TRANSACTION, deadline)
            request = wire.init_producer_id(txn_id, _TERMINATE_TXN_TIMEOUT_MS)
            response = self._request(node, request, deadline, "InitProducerId")
            if not is_success(ApiKey.INIT_PRODUCER_ID, response.error_code):
                raise error_for(ApiKey.INIT_PRODUCER_ID, response.error_code,
                                f"transactional id {txn_id!r}")

        self._retrying("InitProducerId", deadline, attempt)

    # -- life -----------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Close the connections and stop the I/O thread; idempotent."""
        self._runner.close(_CLOSE_WAIT if timeout is None else timeout)
        self._finalizer.detach()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Admin {','.join(self.config.bootstrap_servers)}>"

    # -- internals ------------------------------------------------------------------------------

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + timeout_of(timeout, self.config.default_api_timeout_ms)

    def _request(self, node: int | None, request: Any, deadline: float, what: str) -> Any:
        return self._runner.call(node, request, deadline, what).result()

    def _retrying(self, what: str, deadline: float, attempt: Callable[[], _T]) -> _T:
        """``attempt()`` until it returns, or raises a non-retriable error; retriable errors
        are retried after the backoff until ``deadline``."""
        failures = 0
        while True:
            try:
                return attempt()
            except _NotRetried as wrapped:
                raise wrapped.error from None
            except AllBrokersDownError:  # never reached one: a wrong address, said at once
                raise
            except RetriableError as exc:
                failures += 1
                delay = self._backoff.delay(failures)
                left = deadline - time.monotonic()
                if left <= 0:
                    if isinstance(exc, KafkaTimeoutError):
                        raise
                    raise KafkaTimeoutError(f"{what} did not finish in time") from exc
                log.debug("%s: %s; retrying in %.3f s", what, exc, delay)
                time.sleep(min(delay, left))

    def _metadata(self, topics: list[str] | None, deadline: float) -> Any:
        response = self._request(None, wire.metadata(topics), deadline, "Metadata")
        with self._runner.lock:  # node addresses, and leaders for the lookups below
            self._runner.client.metadata.on_response(response, time.monotonic())
        return response

    def _describe_topics(self, names: list[str], deadline: float) -> list[TopicDescription]:
        response = self._metadata(names, deadline)
        found = {t.name: t for t in response.topics}
        out = []
        for name in names:
            topic = found.get(name)
            code = _UNKNOWN_TOPIC if topic is None else topic.error_code
            if code == _UNKNOWN_TOPIC:  # not retried: waiting will not create it
                raise _final(error_for(ApiKey.METADATA, code, f"topic {name!r}"))
            if not is_success(ApiKey.METADATA, code):
                raise error_for(ApiKey.METADATA, code, f"topic {name!r}")
            assert topic is not None
            parts = tuple(sorted((PartitionInfo(
                p.partition_index, None if p.leader_id == _NO_LEADER else p.leader_id,
                tuple(p.replica_nodes or ()), tuple(p.isr_nodes or ()))
                for p in topic.partitions), key=lambda p: p.partition))
            out.append(TopicDescription(name, parts, bool(topic.is_internal)))
        return out

    def _leaders(self, tps: list[TopicPartition], deadline: float) -> dict[TopicPartition, int]:
        """Each partition's leader, from a fresh Metadata answer.

        Raises:
            EosError: a topic does not exist (not retried), or a partition has no leader
                (LEADER_NOT_AVAILABLE, retriable).
        """
        response = self._metadata(sorted({tp.topic for tp in tps}), deadline)
        leaders: dict[TopicPartition, int] = {}
        for topic in response.topics:
            if topic.error_code == _UNKNOWN_TOPIC:
                raise _final(error_for(ApiKey.METADATA, topic.error_code,
                                       f"topic {topic.name!r}"))
            if not is_success(ApiKey.METADATA, topic.error_code):
                raise error_for(ApiKey.METADATA, topic.error_code, f"topic {topic.name!r}")
            for p in topic.partitions:
                if p.leader_id != _NO_LEADER:
                    leaders[TopicPartition(topic.name, p.partition_index)] = p.leader_id
        missing = [tp for tp in tps if tp not in leaders]
        if missing:
            raise error_for(ApiKey.METADATA, 5, f"no leader for {_tp_text(missing[0])}")
        return leaders

    def _to_every_broker(self, request: Callable[[], Any], deadline: float,
                         what: str) -> list[tuple[int, Any]]:
        self._metadata([], deadline)
        with self._runner.lock:
            nodes = sorted(self._runner.client.metadata.nodes)
        calls = [(node, self._runner.submit(node, request())) for node in nodes]
        self._runner.wait([c for _, c in calls], deadline, what)
        return [(node, call.result()) for node, call in calls]

    def _coordinator(self, key: str, key_type: int, deadline: float) -> int:
        response = self._request(None, wire.find_coordinator(key, key_type), deadline,
                                 "FindCoordinator")
        code, node, message = read_coordinator(response)
        if code or node is None:
            raise error_for(ApiKey.FIND_COORDINATOR, code, message)
        with self._runner.lock:
            self._runner.client.add_node(node.node_id, node.host, node.port)
        return node.node_id

    def _describe_one(self, txn_id: str, deadline: float) -> TransactionDescription:
        node = self._coordinator(txn_id, wire.TRANSACTION, deadline)
        response = self._request(node, wire.describe_transactions([txn_id]), deadline,
                                 "DescribeTransactions")
        (state,) = response.transaction_states
        if not is_success(ApiKey.DESCRIBE_TRANSACTIONS, state.error_code):
            raise error_for(ApiKey.DESCRIBE_TRANSACTIONS, state.error_code,
                            f"transactional id {txn_id!r}")
        partitions = tuple(sorted(TopicPartition(t.topic, p) for t in state.topics
                                  for p in t.partitions))
        return TransactionDescription(txn_id, state.transaction_state, state.producer_id,
                                      state.producer_epoch, state.transaction_timeout_ms,
                                      state.transaction_start_time_ms, partitions, node)

    def _describe_producers(self, tps: list[TopicPartition], deadline: float,
                            ) -> dict[TopicPartition, list[ProducerState]]:
        leaders = self._leaders(tps, deadline)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            by_leader.setdefault(leaders[tp], []).append(tp)
        calls = [self._runner.submit(node, wire.describe_producers(group))
                 for node, group in by_leader.items()]
        self._runner.wait(calls, deadline, "DescribeProducers")
        out: dict[TopicPartition, list[ProducerState]] = {}
        for call in calls:
            for topic in call.result().topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    if not is_success(ApiKey.DESCRIBE_PRODUCERS, p.error_code):
                        raise error_for(ApiKey.DESCRIBE_PRODUCERS, p.error_code,
                                        _detail(_tp_text(tp), p.error_message))
                    out[tp] = [ProducerState(s.producer_id, s.producer_epoch, s.last_sequence,
                                             s.last_timestamp, s.coordinator_epoch,
                                             s.current_txn_start_offset)
                               for s in p.active_producers]
        missing = [tp for tp in tps if tp not in out]
        if missing:
            raise ProtocolError(f"DescribeProducers did not answer for {_tp_text(missing[0])}",
                                api=ApiKey.DESCRIBE_PRODUCERS)
        return out

    def _offsets_for_time(self, tps: list[TopicPartition], timestamp: int, isolation: int,
                          deadline: float) -> dict[TopicPartition, int | None]:
        leaders = self._leaders(tps, deadline)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            by_leader.setdefault(leaders[tp], []).append(tp)
        calls = [self._runner.submit(node, list_offsets_request(group, timestamp, isolation))
                 for node, group in by_leader.items()]
        self._runner.wait(calls, deadline, "ListOffsets")
        answers = {}
        for call in calls:
            answers.update(read_list_offsets(call.result()))
        out: dict[TopicPartition, int | None] = {}
        for tp in tps:
            answer = answers.get(tp)
            code = _UNKNOWN_TOPIC if answer is None else answer.error_code
            if not is_success(ApiKey.LIST_OFFSETS, code):
                raise error_for(ApiKey.LIST_OFFSETS, code, _tp_text(tp))
            assert answer is not None
            out[tp] = None if answer.offset is None or answer.offset < 0 else answer.offset
        return out

    def _ends(self, tps: list[TopicPartition], deadline: float, *, want_end: bool,
              isolation: int) -> dict[TopicPartition, Watermarks]:
        """Where ``tps`` begin (and end), as the consumer asks it (a Fetch for the end)."""
        if not tps:
            return {}
        query = OffsetQuery(tps, want_end=want_end, isolation=isolation, backoff=self._backoff)
        refresh = functools.partial(self._retrying, "Metadata", deadline,
                                    functools.partial(self._leaders, tps, deadline))
        refresh()
        while not query.done:
            now = time.monotonic()
            with self._runner.lock:
                steps = query.steps(now, self._runner.client.metadata.leader)
            if not steps:
                wait = min(query.next_timer(), deadline) - now
                if wait <= 0 and now >= deadline:
                    raise KafkaTimeoutError("the partitions' offsets did not come in time")
                time.sleep(max(0.0, min(wait, self._backoff.delay(1))))
                continue
            calls: list[tuple[Any, Call]] = [(s, self._runner.submit(s.node, s.request))
                                            for s in steps]
            self._runner.wait([c for _, c in calls], deadline, "the partitions' offsets")
            for step, call in calls:
                if call.error is None:
                    query.on_response(step, call.response, time.monotonic())
                elif isinstance(call.error, RetriableError):
                    query.on_failure(step, call.error, time.monotonic())
                else:
                    raise call.error
            if query.stale_leaders and not query.done:
                query.stale_leaders = False
                refresh()
        if query.error is not None:
            raise query.error
        return query.results


def _names(items: Iterable[str]) -> list[str]:
    if isinstance(items, str):
        raise TypeError(f"expected an iterable of names, got the str {items!r}")
    names = list(items)
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a name must be a non-empty str, got {name!r}")
    return names


def _partitions(items: Iterable[TopicPartition]) -> list[TopicPartition]:
    out = []
    for item in items:
        topic, partition = item
        if not isinstance(topic, str) or not topic or type(partition) is not int \
                or partition < 0:
            raise TypeError(f"expected a TopicPartition(topic, partition >= 0), got {item!r}")
        out.append(TopicPartition(topic, partition))
    return list(dict.fromkeys(out))


def _isolation(level: str) -> int:
    if level not in ("read_committed", "read_uncommitted"):
        raise ValueError(f"isolation_level must be read_committed or read_uncommitted, "
                         f"got {level!r}")
    return _READ_COMMITTED if level == "read_committed" else 0


def _member(member: Any, protocol_type: str) -> MemberDescription:
    assignment: tuple[TopicPartition, ...] = ()
    if protocol_type == CONSUMER_PROTOCOL and member.member_assignment:
        data = member.member_assignment
        assignment = tuple(read_assignment(data if isinstance(data, bytes) else bytes(data)))
    return MemberDescription(member.member_id, member.group_instance_id, member.client_id,
                             member.client_host, assignment)


class _NotRetried(Exception):
    """Carries an error that :meth:`Admin._retrying` raises at once, retriable or not (a
    topic that does not exist will not appear by waiting)."""

    def __init__(self, error: EosError) -> None:
        super().__init__(str(error))
        self.error = error


def _final(error: EosError) -> _NotRetried:
    return _NotRetried(error)


def _detail(what: str, message: str | None) -> str:
    return f"{what}: {message}" if message else what


def _tp_text(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _ms_left(deadline: float) -> int:
    return max(1, int((deadline - time.monotonic()) * 1000))


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())
