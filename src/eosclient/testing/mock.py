"""librdkafka's mock Kafka cluster, driven through ctypes, for fault-injection tests.

Why: the exactly-once paths that matter most are the ones a healthy broker never takes:
``COORDINATOR_LOAD_IN_PROGRESS`` on ``InitProducerId``, a slow ``EndTxn``, a fenced ``Produce``,
a broker that vanishes mid-transaction. librdkafka ships an in-process mock cluster that speaks
the Kafka protocol on loopback ports and lets a test script exactly those answers. It is not a
semantic broker (see BROKERS.md), so use it for "the broker answered X" tests only.

How: the confluent-kafka wheel bundles librdkafka as a shared object that exports the
``rd_kafka_mock_*`` C API, but confluent-kafka binds none of it. This module finds that object
next to the installed ``confluent_kafka`` package, declares the C signature of every function it
calls (a wrong ``argtypes``/``restype`` crashes the interpreter rather than raising), and wraps a
cluster in :class:`MockCluster`. A cluster needs an ``rd_kafka_t`` handle to live in; a producer
handle with no brokers and a quiet log level is enough.

Theory of operation of an injection: the mock keeps error stacks keyed by API key, one per
cluster, one per broker and one per partition. A request pops the head of its broker's stack for
its key if that stack exists, else the cluster's; an empty stack means "answer normally". A broker
stack, once created, shadows the cluster stack for that key on that broker even after it is
drained. Produce and Fetch also pop each partition's stack, setting only that partition's error.
Stacks are consumed by *any* client that sends the key, including confluent-kafka's background
requests, so push errors right before the request they are meant for.

Lifetime: :meth:`MockCluster.close` destroys the cluster, then the handle. It is idempotent,
runs from ``__exit__``, and also runs from a ``weakref.finalize`` if a test forgets to close.
Close a cluster from the thread that uses it: a call racing ``close()`` reaches freed memory.

Exceptions::

    LibrdkafkaNotFound (ImportError)   confluent-kafka or its bundled librdkafka is missing
    MockClusterError (RuntimeError)    a mock call returned an error; .code, .code_name, .call
    ValueError                         bad arguments, or the cluster is already closed
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NamedTuple, Self

from eosclient._extras import install_extra

__all__ = ["LibrdkafkaNotFound", "MockCluster", "MockClusterError", "MockRequest",
           "find_librdkafka"]

_INSTALL_HINT: Final = (
    f"librdkafka's mock cluster needs confluent-kafka: {install_extra('testing')} "
    "(or pip install confluent-kafka)"
)

# Where wheel repair tools put the bundled library, relative to the confluent_kafka package:
# auditwheel (Linux) and delvewheel (Windows) use a sibling "<pkg>.libs", delocate (macOS)
# ".dylibs".
_LIBRARY_GLOBS: Final = (
    ("../confluent_kafka.libs", "librdkafka*.so*"),
    ("../confluent_kafka.libs", "librdkafka*.dll"),
    (".dylibs", "librdkafka*.dylib"),
)

_RD_KAFKA_PRODUCER: Final = 0  # rd_kafka_type_t
_RD_KAFKA_CONF_OK: Final = 0  # rd_kafka_conf_res_t
_ERRSTR_SIZE: Final = 512
_DEFAULT_LOG_LEVEL: Final = 3  # syslog LOG_ERR: keep real errors, drop notices like CONFWARN
_ERR_FAIL: Final = -196  # RD_KAFKA_RESP_ERR__FAIL, for C calls that only return NULL or a status
_INT16_MAX: Final = 2**15 - 1
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

# Every C function this module calls: name -> (restype, fixed argtypes), beside its C prototype.
# Opaque pointers (rd_kafka_t *, rd_kafka_conf_t *, rd_kafka_mock_cluster_t *) are c_void_p so
# they are never truncated to a C int; rd_kafka_resp_err_t and rd_kafka_type_t are C enums (int).
# The two variadic functions list only their fixed arguments; see _variadic_ints.
_PTR, _STR, _INT, _I16, _I32, _SIZE = (
    ctypes.c_void_p,
    ctypes.c_char_p,
    ctypes.c_int,
    ctypes.c_int16,
    ctypes.c_int32,
    ctypes.c_size_t,
)
_SIGNATURES: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    # rd_kafka_conf_t *rd_kafka_conf_new(void)
    "rd_kafka_conf_new": (_PTR, ()),
    # void rd_kafka_conf_destroy(rd_kafka_conf_t *conf)
    "rd_kafka_conf_destroy": (None, (_PTR,)),
    # rd_kafka_conf_res_t rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name,
    #                                       const char *value, char *errstr, size_t errstr_size)
    "rd_kafka_conf_set": (_INT, (_PTR, _STR, _STR, _STR, _SIZE)),
    # rd_kafka_t *rd_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *errstr,
    #                          size_t errstr_size)
    "rd_kafka_new": (_PTR, (_INT, _PTR, _STR, _SIZE)),
    # void rd_kafka_destroy(rd_kafka_t *rk)
    "rd_kafka_destroy": (None, (_PTR,)),
    # const char *rd_kafka_err2name(rd_kafka_resp_err_t err)
    "rd_kafka_err2name": (_STR, (_INT,)),
    # rd_kafka_mock_cluster_t *rd_kafka_mock_cluster_new(rd_kafka_t *rk, int broker_cnt)
    "rd_kafka_mock_cluster_new": (_PTR, (_PTR, _INT)),
    # void rd_kafka_mock_cluster_destroy(rd_kafka_mock_cluster_t *mcluster)
    "rd_kafka_mock_cluster_destroy": (None, (_PTR,)),
    # const char *rd_kafka_mock_cluster_bootstraps(const rd_kafka_mock_cluster_t *mcluster)
    "rd_kafka_mock_cluster_bootstraps": (_STR, (_PTR,)),
    # rd_kafka_resp_err_t rd_kafka_mock_topic_create(rd_kafka_mock_cluster_t *mcluster,
    #     const char *topic, int partition_cnt, int replication_factor)
    "rd_kafka_mock_topic_create": (_INT, (_PTR, _STR, _INT, _INT)),
    # void rd_kafka_mock_push_request_errors_array(rd_kafka_mock_cluster_t *mcluster,
    #     int16_t ApiKey, size_t cnt, const rd_kafka_resp_err_t *errors)
    "rd_kafka_mock_push_request_errors_array": (None, (_PTR, _I16, _SIZE, ctypes.POINTER(_INT))),
    # rd_kafka_resp_err_t rd_kafka_mock_broker_push_request_error_rtts(
    #     rd_kafka_mock_cluster_t *mcluster, int32_t broker_id, int16_t ApiKey, size_t cnt,
    #     ...)  /* cnt pairs: rd_kafka_resp_err_t err, int rtt_ms */
    "rd_kafka_mock_broker_push_request_error_rtts": (_INT, (_PTR, _I32, _I16, _SIZE)),
    # rd_kafka_resp_err_t rd_kafka_mock_partition_push_request_errors(
    #     rd_kafka_mock_cluster_t *mcluster, const char *topic, int32_t partition,
    #     int16_t ApiKey, size_t cnt, ...)  /* cnt x rd_kafka_resp_err_t */
    "rd_kafka_mock_partition_push_request_errors": (_INT, (_PTR, _STR, _I32, _I16, _SIZE)),
    # rd_kafka_resp_err_t rd_kafka_mock_broker_set_down(rd_kafka_mock_cluster_t *mcluster,
    #                                                   int32_t broker_id)
    "rd_kafka_mock_broker_set_down": (_INT, (_PTR, _I32)),
    # rd_kafka_resp_err_t rd_kafka_mock_broker_set_up(rd_kafka_mock_cluster_t *mcluster,
    #                                                 int32_t broker_id)
    "rd_kafka_mock_broker_set_up": (_INT, (_PTR, _I32)),
    # rd_kafka_resp_err_t rd_kafka_mock_broker_set_rtt(rd_kafka_mock_cluster_t *mcluster,
    #                                                  int32_t broker_id, int rtt_ms)
    "rd_kafka_mock_broker_set_rtt": (_INT, (_PTR, _I32, _INT)),
    # rd_kafka_resp_err_t rd_kafka_mock_partition_set_leader(rd_kafka_mock_cluster_t *mcluster,
    #     const char *topic, int32_t partition, int32_t broker_id)
    "rd_kafka_mock_partition_set_leader": (_INT, (_PTR, _STR, _I32, _I32)),
    # rd_kafka_resp_err_t rd_kafka_mock_partition_set_follower(rd_kafka_mock_cluster_t *mcluster,
    #     const char *topic, int32_t partition, int32_t broker_id)
    "rd_kafka_mock_partition_set_follower": (_INT, (_PTR, _STR, _I32, _I32)),
    # rd_kafka_resp_err_t rd_kafka_mock_coordinator_set(rd_kafka_mock_cluster_t *mcluster,
    #     const char *key_type, const char *key, int32_t broker_id)
    "rd_kafka_mock_coordinator_set": (_INT, (_PTR, _STR, _STR, _I32)),
    # rd_kafka_resp_err_t rd_kafka_mock_partition_delete_records(
    #     rd_kafka_mock_cluster_t *mcluster, const char *topic, int32_t partition,
    #     int64_t before_offset)
    "rd_kafka_mock_partition_delete_records": (_INT, (_PTR, _STR, _I32, ctypes.c_int64)),
    # void rd_kafka_mock_start_request_tracking(rd_kafka_mock_cluster_t *mcluster)
    "rd_kafka_mock_start_request_tracking": (None, (_PTR,)),
    # void rd_kafka_mock_stop_request_tracking(rd_kafka_mock_cluster_t *mcluster)
    "rd_kafka_mock_stop_request_tracking": (None, (_PTR,)),
    # rd_kafka_mock_request_t **rd_kafka_mock_get_requests(rd_kafka_mock_cluster_t *mcluster,
    #                                                      size_t *cntp)
    "rd_kafka_mock_get_requests": (ctypes.POINTER(_PTR), (_PTR, ctypes.POINTER(_SIZE))),
    # int32_t rd_kafka_mock_request_id(rd_kafka_mock_request_t *mreq)  /* the broker id */
    "rd_kafka_mock_request_id": (_I32, (_PTR,)),
    # int16_t rd_kafka_mock_request_api_key(rd_kafka_mock_request_t *mreq)
    "rd_kafka_mock_request_api_key": (_I16, (_PTR,)),
    # rd_ts_t rd_kafka_mock_request_timestamp(rd_kafka_mock_request_t *mreq)  /* int64 us */
    "rd_kafka_mock_request_timestamp": (ctypes.c_int64, (_PTR,)),
    # void rd_kafka_mock_request_destroy_array(rd_kafka_mock_request_t **mreqs, size_t cnt)
    "rd_kafka_mock_request_destroy_array": (None, (ctypes.POINTER(_PTR), _SIZE)),
}


class MockRequest(NamedTuple):
    """One request a mock broker received (request tracking).

    Attributes:
        broker_id: The broker it was sent to.
        api_key: Its Kafka API key.
        at: When the broker read it, in ``time.monotonic()`` seconds (librdkafka stamps it
            with CLOCK_MONOTONIC, Python's monotonic clock on Linux).
    """

    broker_id: int
    api_key: int
    at: float


class LibrdkafkaNotFound(ImportError):
    """confluent-kafka is not installed, or its wheel carries no usable librdkafka."""


class MockClusterError(RuntimeError):
    """A librdkafka mock call returned an error code.

    Attributes:
        code: The ``rd_kafka_resp_err_t`` value (Kafka codes are >= 0, librdkafka's own < 0).
        code_name: librdkafka's name for the code, e.g. ``TOPIC_ALREADY_EXISTS``.
        call: The C function that failed.
    """

    def __init__(self, call: str, code: int, code_name: str, detail: str = "") -> None:
        message = f"{call} failed: {code_name} ({code})"
        super().__init__(f"{message}: {detail}" if detail else message)
        self.call = call
        self.code = code
        self.code_name = code_name


def find_librdkafka() -> Path:
    """Locate the librdkafka shared object bundled in the confluent-kafka wheel.

    Returns:
        The path of the shared object.

    Raises:
        LibrdkafkaNotFound: confluent-kafka cannot be imported, or no librdkafka file sits where
            wheels put it. Nothing is loaded.
    """
    try:
        import confluent_kafka  # noqa: PLC0415 - optional dependency, imported on demand
    except ImportError as exc:
        raise LibrdkafkaNotFound(_INSTALL_HINT) from exc
    package_dir = Path(confluent_kafka.__file__).parent
    for folder, pattern in _LIBRARY_GLOBS:
        found = sorted((package_dir / folder).resolve().glob(pattern))
        if found:
            return found[0]
    raise LibrdkafkaNotFound(f"no bundled librdkafka found beside {package_dir}; {_INSTALL_HINT}")


@functools.cache
def _librdkafka() -> ctypes.CDLL:
    """Load librdkafka once per process and declare every signature in ``_SIGNATURES``."""
    cdll = ctypes.CDLL(str(find_librdkafka()))
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            function = getattr(cdll, name)
        except AttributeError as exc:
            raise LibrdkafkaNotFound(f"librdkafka at {cdll._name} lacks {name}") from exc
        function.restype = restype
        function.argtypes = argtypes
    return cdll


def _code_name(lib: ctypes.CDLL, code: int) -> str:
    name: bytes | None = lib.rd_kafka_err2name(code)
    return name.decode("ascii", "replace") if name else str(code)


def _destroy(lib: ctypes.CDLL, handle: int, cluster: int) -> None:
    """Tear down in dependency order: the cluster lives inside the handle."""
    lib.rd_kafka_mock_cluster_destroy(cluster)
    lib.rd_kafka_destroy(handle)


def _new_handle(lib: ctypes.CDLL, log_level: int) -> int:
    """Create the producer handle the cluster lives in.

    Raises:
        MockClusterError: The configuration or ``rd_kafka_new`` was refused; nothing leaks.
    """
    conf: int = lib.rd_kafka_conf_new()
    errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
    settings = {"log_level": str(log_level), "client.id": "eosclient-mock"}
    for key, value in settings.items():
        result = lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, _ERRSTR_SIZE)
        if result != _RD_KAFKA_CONF_OK:
            lib.rd_kafka_conf_destroy(conf)
            raise _failure(lib, "rd_kafka_conf_set", errstr)
    handle: int | None = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
    if not handle:
        lib.rd_kafka_conf_destroy(conf)  # rd_kafka_new only takes ownership on success
        raise _failure(lib, "rd_kafka_new", errstr)
    return handle


def _failure(lib: ctypes.CDLL, call: str, errstr: ctypes.Array[ctypes.c_char]) -> MockClusterError:
    detail = errstr.value.decode(errors="replace")
    return MockClusterError(call, _ERR_FAIL, _code_name(lib, _ERR_FAIL), detail)


def _new_cluster(lib: ctypes.CDLL, handle: int, num_brokers: int) -> int:
    """Create the cluster inside ``handle``; destroy ``handle`` if that fails."""
    cluster: int | None = lib.rd_kafka_mock_cluster_new(handle, num_brokers)
    if not cluster:
        lib.rd_kafka_destroy(handle)
        detail = "no cluster created (librdkafka logs why)"
        raise MockClusterError(
            "rd_kafka_mock_cluster_new", _ERR_FAIL, _code_name(lib, _ERR_FAIL), detail
        )
    return cluster


def _check_range(what: str, value: int, low: int, high: int = _INT32_MAX) -> None:
    """Refuse a value C would misread, before any C call.

    ctypes silently truncates ints too wide for the declared C type, and the mock indexes arrays
    with some values unchecked (a negative partition writes out of bounds).
    """
    if not low <= value <= high:
        raise ValueError(f"{what} must be in [{low}, {high}], not {value}")


def _check_codes(codes: Sequence[int]) -> None:
    """Refuse an empty push (it would still create a shadowing broker stack) or a wide code."""
    if not codes:
        raise ValueError("push at least one error code")
    for code in codes:
        _check_range("an error code", code, _INT32_MIN)


def _variadic_ints(values: Sequence[int]) -> list[ctypes.c_int]:
    """The variadic tail of a call, each value an explicit C int (what ``va_arg`` reads).

    Typed instances let CPython's libffi build a true variadic call on ABIs that need one
    (Apple arm64); on x86-64 and Linux arm64 the values travel like fixed arguments.
    """
    return [ctypes.c_int(value) for value in values]


class MockCluster:
    """An in-process librdkafka mock cluster with fault injection.

    Use it as a context manager so it is closed even when a test fails::

        with MockCluster(3, topics={"orders": 4}) as cluster:
            producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})

    Broker ids are ``1..num_brokers``. Error codes are Kafka's (``29`` is
    TOPIC_AUTHORIZATION_FAILED); librdkafka's ``-195`` (``_TRANSPORT``) makes the broker close
    the connection instead of answering. API keys are Kafka's (``0`` Produce, ``22``
    InitProducerId); kafka-python's ``SomeRequest.API_KEY`` gives them.

    Attributes:
        num_brokers: The number of brokers the cluster was created with.
        bootstrap_servers: ``"127.0.0.1:PORT,..."``, one entry per broker, ports picked by the
            kernel; valid until :meth:`close`.
    """

    def __init__(
        self,
        num_brokers: int = 1,
        *,
        topics: Mapping[str, int] | None = None,
        log_level: int = _DEFAULT_LOG_LEVEL,
    ) -> None:
        """Start a cluster on loopback ports.

        Args:
            num_brokers: How many brokers to start (at least 1).
            topics: Topics to create up front, name to partition count (replication factor 1).
                Topics not created here are auto-created with 4 partitions on first use.
            log_level: librdkafka log level (syslog numbering) of the cluster's own handle; the
                default keeps errors and drops notices. Clients keep their own settings.

        Raises:
            LibrdkafkaNotFound: confluent-kafka or its librdkafka is missing.
            MockClusterError: librdkafka refused to create the handle, cluster or a topic;
                anything already created has been destroyed.
            ValueError: ``num_brokers`` or a topic's partition count is below 1.
        """
        _check_range("num_brokers", num_brokers, 1)
        lib = _librdkafka()
        handle = _new_handle(lib, log_level)
        cluster = _new_cluster(lib, handle, num_brokers)
        self._lib = lib
        self._cluster = cluster
        self._finalizer = weakref.finalize(self, _destroy, lib, handle, cluster)
        self.num_brokers = num_brokers
        self.bootstrap_servers: str = lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()
        try:
            for name, partitions in (topics or {}).items():
                self.create_topic(name, partitions)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.bootstrap_servers
        return f"<MockCluster num_brokers={self.num_brokers} {state}>"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run (the brokers' ports are closed)."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Destroy the cluster, then its handle. Safe to call any number of times.

        Clients still connected see their connections drop.
        """
        self._finalizer()

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1) -> None:
        """Create a topic with ``partitions`` partitions, leaders spread over the brokers.

        Args:
            name: Topic name.
            partitions: Partition count (at least 1).
            replication_factor: Replicas per partition (at least 1); librdkafka caps it at the
                number of brokers.

        Raises:
            MockClusterError: e.g. TOPIC_ALREADY_EXISTS (36); the cluster is unchanged.
            ValueError: A count below 1, or the cluster is closed.
        """
        _check_range("partitions", partitions, 1)
        _check_range("replication_factor", replication_factor, 1)
        code = self._live_lib().rd_kafka_mock_topic_create(
            self._cluster, name.encode(), partitions, replication_factor
        )
        self._raise_for("rd_kafka_mock_topic_create", code)

    def push_request_errors(self, api_key: int, *codes: int) -> None:
        """Make the next requests with ``api_key``, to any broker, fail with ``codes`` in order.

        A broker with its own error stack for ``api_key`` (see
        :meth:`push_broker_request_errors`) ignores these.

        Args:
            api_key: Kafka API key, e.g. 22 for InitProducerId.
            *codes: One error code per request; ``0`` lets that request succeed.

        Raises:
            ValueError: No codes, a value out of its C type's range, or the cluster is closed.
                Nothing was pushed.
        """
        _check_range("api_key", api_key, 0, _INT16_MAX)
        _check_codes(codes)
        array = (ctypes.c_int * len(codes))(*codes)
        self._live_lib().rd_kafka_mock_push_request_errors_array(
            self._cluster, api_key, len(codes), array
        )

    def push_broker_request_errors(
        self, broker_id: int, api_key: int, errors: Sequence[tuple[int, int]]
    ) -> None:
        """Make the next ``api_key`` requests to one broker fail, each answered after a delay.

        From then on this broker never consults the cluster-wide stack for ``api_key``, even
        once these errors are used up.

        Args:
            broker_id: Broker to affect (1-based).
            api_key: Kafka API key.
            errors: ``(code, rtt_ms)`` per request, in order; code ``0`` with an RTT just
                delays a successful answer.

        Raises:
            MockClusterError: Unknown broker (``_UNKNOWN_BROKER``, -146); nothing was pushed.
            ValueError: No errors, a value out of range (negative RTT, broker id below 1), or
                the cluster is closed. Nothing was pushed.
        """
        _check_range("broker_id", broker_id, 1)
        _check_range("api_key", api_key, 0, _INT16_MAX)
        _check_codes([code for code, _ in errors])
        for _, rtt_ms in errors:
            _check_range("rtt_ms", rtt_ms, 0)
        tail = _variadic_ints([value for pair in errors for value in pair])
        code = self._live_lib().rd_kafka_mock_broker_push_request_error_rtts(
            self._cluster, broker_id, api_key, len(errors), *tail
        )
        self._raise_for("rd_kafka_mock_broker_push_request_error_rtts", code)

    def push_partition_errors(self, topic: str, partition: int, api_key: int, *codes: int) -> None:
        """Make the next ``api_key`` requests for one partition fail with ``codes`` in order.

        Only the partition's error in the response is set; the rest of the request succeeds.
        librdkafka consults partition stacks for Produce (0), Fetch (1) and the share-group
        ShareFetch/ShareAcknowledge APIs only; on other keys the codes are never consumed.
        Beware: an unknown ``topic`` is auto-created on the spot with ``partition + 1``
        partitions (librdkafka's behaviour), so create topics first.

        Args:
            topic: Topic name.
            partition: Partition index.
            api_key: Kafka API key, normally 0 (Produce) or 1 (Fetch).
            *codes: One error code per request touching the partition.

        Raises:
            MockClusterError: Partition out of range for an existing topic
                (UNKNOWN_TOPIC_OR_PART, 3); nothing was pushed.
            ValueError: No codes, a value out of its C type's range, or the cluster is closed.
                Nothing was pushed.
        """
        _check_range("partition", partition, 0)
        _check_range("api_key", api_key, 0, _INT16_MAX)
        _check_codes(codes)
        tail = _variadic_ints(codes)
        code = self._live_lib().rd_kafka_mock_partition_push_request_errors(
            self._cluster, topic.encode(), partition, api_key, len(codes), *tail
        )
        self._raise_for("rd_kafka_mock_partition_push_request_errors", code)

    def set_broker_down(self, broker_id: int) -> None:
        """Close a broker's connections and refuse new ones; its port stays reserved.

        Raises:
            MockClusterError: Unknown broker (BROKER_NOT_AVAILABLE, 8).
            ValueError: A broker id below 1, or the cluster is closed.
        """
        _check_range("broker_id", broker_id, 1)
        code = self._live_lib().rd_kafka_mock_broker_set_down(self._cluster, broker_id)
        self._raise_for("rd_kafka_mock_broker_set_down", code)

    def set_broker_up(self, broker_id: int) -> None:
        """Accept connections on a downed broker's port again.

        Raises:
            MockClusterError: Unknown broker (BROKER_NOT_AVAILABLE, 8).
            ValueError: A broker id below 1, or the cluster is closed.
        """
        _check_range("broker_id", broker_id, 1)
        code = self._live_lib().rd_kafka_mock_broker_set_up(self._cluster, broker_id)
        self._raise_for("rd_kafka_mock_broker_set_up", code)

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of a broker by ``rtt_ms`` (``0`` removes the delay).

        Raises:
            MockClusterError: Unknown broker (BROKER_NOT_AVAILABLE, 8).
            ValueError: A negative RTT, a broker id below 1, or the cluster is closed.
        """
        _check_range("broker_id", broker_id, 1)
        _check_range("rtt_ms", rtt_ms, 0)
        code = self._live_lib().rd_kafka_mock_broker_set_rtt(self._cluster, broker_id, rtt_ms)
        self._raise_for("rd_kafka_mock_broker_set_rtt", code)

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make ``broker_id`` the leader of one partition, as a leader election does.

        Clients that send to the old leader are answered NOT_LEADER_OR_FOLLOWER (6) and find
        the new one in Metadata. The partition's records stay where they are (the mock keeps
        one log per partition, not per replica).

        Raises:
            MockClusterError: Unknown topic or partition (UNKNOWN_TOPIC_OR_PART, 3).
            ValueError: A partition below 0, a broker id below 1, or the cluster is closed.
        """
        self._set_partition_broker("rd_kafka_mock_partition_set_leader", topic, partition,
                                   broker_id)

    def set_partition_follower(self, topic: str, partition: int, broker_id: int) -> None:
        """Name ``broker_id`` the replica a consumer should fetch from (KIP-392's
        preferred read replica, which the mock answers Fetch with).

        Raises:
            MockClusterError: Unknown topic or partition (UNKNOWN_TOPIC_OR_PART, 3).
            ValueError: A partition below 0, a broker id below 1, or the cluster is closed.
        """
        self._set_partition_broker("rd_kafka_mock_partition_set_follower", topic, partition,
                                   broker_id)

    def _set_partition_broker(self, call: str, topic: str, partition: int,
                              broker_id: int) -> None:
        """``call(cluster, topic, partition, broker_id)``: a partition's leader or follower."""
        _check_range("partition", partition, 0)
        _check_range("broker_id", broker_id, 1)
        code = getattr(self._live_lib(), call)(self._cluster, topic.encode(), partition,
                                               broker_id)
        self._raise_for(call, code)

    def set_coordinator(self, kind: str, key: str, broker_id: int) -> None:
        """Move the coordinator of a transactional id or a group to ``broker_id``.

        The old coordinator answers NOT_COORDINATOR (16) from then on, and FindCoordinator
        names the new one, as when a coordinator's partition changes leader.

        Args:
            kind: ``"transaction"`` or ``"group"``.
            key: The transactional id or the group id.
            broker_id: The new coordinator (1-based).

        Raises:
            MockClusterError: librdkafka refused (an unknown kind).
            ValueError: An unknown ``kind``, a broker id below 1, or the cluster is closed.
        """
        if kind not in ("transaction", "group"):
            raise ValueError(f"kind must be 'transaction' or 'group', not {kind!r}")
        _check_range("broker_id", broker_id, 1)
        code = self._live_lib().rd_kafka_mock_coordinator_set(
            self._cluster, kind.encode(), key.encode(), broker_id)
        self._raise_for("rd_kafka_mock_coordinator_set", code)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Delete a partition's record batches that end before ``before_offset``, and make
        ``before_offset`` its log start offset (as Kafka's DeleteRecords does).

        The mock finds the batch a Fetch asks for by walking the partition's log from its
        start, so a reader of a long log that deletes what it has read keeps each Fetch short
        (:func:`eosclient.testing.marker_log.read_logs`).

        Raises:
            MockClusterError: Unknown topic or partition (UNKNOWN_TOPIC_OR_PART, 3), or
                ``before_offset`` past the log's end (OFFSET_OUT_OF_RANGE, 1).
            ValueError: A partition or offset below 0, or the cluster is closed.
        """
        _check_range("partition", partition, 0)
        _check_range("before_offset", before_offset, 0, 2**63 - 1)
        code = self._live_lib().rd_kafka_mock_partition_delete_records(
            self._cluster, topic.encode(), partition, before_offset)
        self._raise_for("rd_kafka_mock_partition_delete_records", code)

    def start_request_tracking(self) -> None:
        """Record every request any broker reads from now on (forgetting any recorded
        before); :meth:`requests` returns them. Only the API and the broker are kept, not
        the request's content nor the answer.

        Raises:
            ValueError: The cluster is closed.
        """
        self._live_lib().rd_kafka_mock_start_request_tracking(self._cluster)

    def stop_request_tracking(self) -> None:
        """Stop recording requests, and forget those recorded.

        Raises:
            ValueError: The cluster is closed.
        """
        self._live_lib().rd_kafka_mock_stop_request_tracking(self._cluster)

    def requests(self) -> list[MockRequest]:
        """The requests recorded since :meth:`start_request_tracking`, in the order read.

        Raises:
            ValueError: The cluster is closed.
        """
        lib = self._live_lib()
        count = ctypes.c_size_t(0)
        array = lib.rd_kafka_mock_get_requests(self._cluster, ctypes.byref(count))
        if not array:
            return []
        try:
            return [MockRequest(lib.rd_kafka_mock_request_id(array[i]),
                                lib.rd_kafka_mock_request_api_key(array[i]),
                                lib.rd_kafka_mock_request_timestamp(array[i]) / 1e6)
                    for i in range(count.value)]
        finally:
            lib.rd_kafka_mock_request_destroy_array(array, count.value)

    def _live_lib(self) -> ctypes.CDLL:
        if self.closed:
            raise ValueError("MockCluster is closed")
        return self._lib

    def _raise_for(self, call: str, code: int) -> None:
        if code:
            raise MockClusterError(call, code, _code_name(self._lib, code))
