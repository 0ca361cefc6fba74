"""Typed settings: frozen, keyword-only dataclasses that also accept Kafka's dotted keys.

Every setting is one dataclass field whose metadata names its Kafka key (``linger.ms``) and the
check that validates and normalises a value; that one declaration serves the Pythonic keyword
(``linger_ms=5``), the dotted key (``config={"linger.ms": 5}``) and the docs. A setting is checked
when the object is built, so a typo, a wrong type or an impossible value fails at construction
with a :class:`~eosclient.errors.ConfigError` that names the key as the caller spelled it (and
suggests the nearest known key for a typo), never later in the I/O thread.

:class:`ClientConfig` holds what every client needs (brokers, timeouts, backoff, metadata);
:class:`ProducerConfig` adds the producer's settings, :class:`ConsumerConfig` the consumer's.
:func:`build` merges keywords and a dotted dict, refusing the same setting given twice with
different values.

Values are not coerced from strings: ``"linger.ms": "5"`` is a type error, as the Python API is
typed. The exceptions are the few settings Kafka users habitually write as words (``acks``).

Security settings (``security.protocol``, ``ssl.*``, ``sasl.*``) are checked together: a SASL
protocol needs a mechanism and its credentials, ``ssl.*`` and ``sasl.*`` settings need a protocol
that uses them (a forgotten ``security.protocol`` would otherwise show only as a connection that
never works). Passwords are kept as :class:`Secret` values: ``repr``, ``str`` and every
:class:`~eosclient.errors.ConfigError` show ``'***'``, never the text; the connection layer
reads it with :meth:`Secret.reveal`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

from eosclient._core.isolation import DEFAULT_MAX_HELD_BYTES
from eosclient._core.limits import string_problem
from eosclient._core.partitioner import Partitioner, default_partitioner
from eosclient._core.records import Deserializer, Serializer, compression_for
from eosclient.errors import ConfigError

__all__ = ["AdminConfig", "ClientConfig", "ConsumerConfig", "ProducerConfig", "Secret", "build",
           "setting"]

Check = Callable[[object, str], object]
"""Validates a value given under a key (as spelled); returns it normalised or raises."""

_C = TypeVar("_C", bound="ClientConfig")
_INT32_MAX = 2**31 - 1
_MAX_IN_FLIGHT = 5
_FETCH_OVERHEAD = 512  # librdkafka: receive.message.max.bytes >= fetch.max.bytes + 512


def _type_name(value: object) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def integer(low: int = 0, high: int = _INT32_MAX) -> Check:
    """A check for an int in ``[low, high]`` (bool is refused: ``True`` is not a count)."""

    def check(value: object, key: str) -> object:
        if type(value) is not int:
            raise ConfigError(f"expected an int, got {_type_name(value)}", key=key)
        if not low <= value <= high:
            raise ConfigError(f"must be in {low}..{high}, got {value}", key=key)
        return value

    return check


def number(low: float = 0.0) -> Check:
    """A check for an int or float of at least ``low`` (normalised to float)."""

    def check(value: object, key: str) -> object:
        if type(value) not in (int, float):
            raise ConfigError(f"expected a number, got {_type_name(value)}", key=key)
        assert isinstance(value, int | float)
        if not value >= low:  # also refuses NaN
            raise ConfigError(f"must be at least {low}, got {value}", key=key)
        return float(value)

    return check


def text(*, optional: bool = False) -> Check:
    """A check for a non-empty str (or None when ``optional``) that fits a Kafka STRING.

    Every text setting goes into requests as an int16-length UTF-8 string (``client.id`` in
    every request header, the ids in InitProducerId, JoinGroup, TxnOffsetCommit...); one that
    does not fit used to pass here and crash the I/O thread encoding its first request.
    """

    def check(value: object, key: str) -> object:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise ConfigError(f"expected a non-empty str, got {_type_name(value)}", key=key)
        problem = string_problem(value)
        if problem is not None:
            raise ConfigError(problem, key=key)
        return value

    return check


def function(*, optional: bool = False) -> Check:
    """A check for a callable (or None when ``optional``)."""

    def check(value: object, key: str) -> object:
        if value is None and optional:
            return None
        if not callable(value):
            raise ConfigError(f"expected a callable, got {_type_name(value)}", key=key)
        return value

    return check


def _servers(value: object, key: str) -> object:
    """``"h:p,h:p"`` or a sequence of ``"h:p"`` -> a tuple of ``"h:p"``, each port checked."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ConfigError(f"expected 'host:port[,host:port...]', got {_type_name(value)}", key=key)
    servers = []
    for item in items:
        host, sep, port = item.strip().rpartition(":") if isinstance(item, str) else ("", "", "")
        if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(f"expected 'host:port', got {item!r}", key=key)
        try:  # what getaddrinfo does with it, on the I/O thread, at the first connect
            host.strip("[]").encode("idna")
        except UnicodeError as exc:
            raise ConfigError(f"host {host!r} is not a valid host name ({exc})", key=key) from None
        servers.append(f"{host}:{int(port)}")
    return tuple(servers)


def _acks(value: object, key: str) -> object:
    if value in ("all", -1, "-1"):
        return -1
    raise ConfigError(
        f"must be 'all' (-1): exactly-once needs every in-sync replica to acknowledge, got "
        f"{value!r}", key=key,
    )


def _idempotence(value: object, key: str) -> object:
    if value is True:
        return True
    raise ConfigError(f"must be True: eosclient producers are always idempotent, got {value!r}",
                      key=key)


def _compression(value: object, key: str) -> object:
    if not isinstance(value, str):
        raise ConfigError(f"expected a str, got {_type_name(value)}", key=key)
    compression_for(value)  # unknown names and missing codec packages raise ConfigError
    return value.lower()


def boolean(value: object, key: str) -> object:
    """A check for a bool (``1``, ``"true"`` and the like are refused: not coerced)."""
    if type(value) is not bool:
        raise ConfigError(f"expected a bool, got {_type_name(value)}", key=key)
    return value


def choice(*names: str) -> Check:
    """A check for one of ``names`` (case-insensitive; normalised to lower case)."""

    def check(value: object, key: str) -> object:
        if not isinstance(value, str) or value.lower() not in names:
            raise ConfigError(f"must be one of {', '.join(names)}, got {_type_name(value)}",
                              key=key)
        return value.lower()

    return check


_ASSIGNOR_NAMES: Final = ("range", "roundrobin", "sticky", "cooperative-sticky")


def _assignors(value: object, key: str) -> object:
    """``"range,roundrobin"`` or a sequence of names -> a tuple of known assignor names."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ConfigError(f"expected assignor names, got {_type_name(value)}", key=key)
    names = tuple(str(i).strip().lower() for i in items)
    unknown = [n for n in names if n not in _ASSIGNOR_NAMES]
    if unknown or len(set(names)) != len(names):
        raise ConfigError("known assignors are range, roundrobin, sticky and cooperative-sticky "
                          f"(each once), got {value!r}", key=key)
    return names


def _no_auto_commit(value: object, key: str) -> object:
    if value is False:
        return False
    raise ConfigError("must be False: eosclient consumers commit only when asked (commit() or "
                      f"send_offsets_to_transaction), got {value!r}", key=key)


@dataclass(frozen=True, slots=True, eq=True)
class Secret:
    """A password or key passphrase: shown as ``'***'`` by ``repr`` and ``str``.

    Kept out of sight so that a config logged, printed in a traceback's locals, or quoted in an
    error never shows it; only the connection layer calls :meth:`reveal`.
    """

    _value: str = field(repr=False)

    def reveal(self) -> str:
        """The secret's text (for the connection layer only)."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"


def secret(value: object, key: str) -> object:
    """A check for a password: a non-empty str (or a :class:`Secret`) -> a Secret, or None.

    Its errors never quote the value, only its type.
    """
    if value is None or isinstance(value, Secret):
        return value
    if not isinstance(value, str) or not value:
        raise ConfigError(f"expected a non-empty str, got a {type(value).__name__}", key=key)
    return Secret(value)


def _protocol(value: object, key: str) -> object:
    names = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    if not isinstance(value, str) or value.upper() not in names:
        raise ConfigError(f"must be one of {', '.join(names)}, got {_type_name(value)}", key=key)
    return value.upper()


def _mechanism(value: object, key: str) -> object:
    names = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    if value is None:
        return None
    if not isinstance(value, str) or value.upper() not in names:
        raise ConfigError(f"must be one of {', '.join(names)}, got {_type_name(value)}", key=key)
    return value.upper()


def _file(value: object, key: str) -> object:
    """A check for the path of a readable file (or None), as librdkafka checks it at creation."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ConfigError(f"expected a file path, got {_type_name(value)}", key=key)
    path = os.fspath(value)
    if not isinstance(path, str):
        raise ConfigError(f"expected a str path, got {_type_name(value)}", key=key)
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise ConfigError(f"no readable file at {path!r}", key=key)
    return path


def _ssl_context(value: object, key: str) -> object:
    if value is None or isinstance(value, ssl.SSLContext):
        return value
    raise ConfigError(f"expected an ssl.SSLContext, got {type(value).__name__}", key=key)


def setting(key: str, check: Check, doc: str) -> dict[str, Any]:
    """A setting's field metadata: its Kafka key, its check and a one-line doc."""
    return {"key": key, "check": check, "doc": doc}


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientConfig:
    """What every eosclient client needs: where the brokers are, and how patient to be.

    Each attribute's Kafka key is in its field metadata (see :meth:`keys`).

    Raises:
        ConfigError: a setting is of the wrong type or out of range (``.key`` names it).
    """

    bootstrap_servers: tuple[str, ...] = field(metadata=setting(
        "bootstrap.servers", _servers, "brokers to start from, 'host:port'"))
    client_id: str = field(default="eosclient", metadata=setting(
        "client.id", text(), "sent in every request header"))
    request_timeout_ms: int = field(default=30_000, metadata=setting(
        "request.timeout.ms", integer(1),
        "a request's answer deadline; the connection is closed when it passes"))
    retry_backoff_ms: int = field(default=100, metadata=setting(
        "retry.backoff.ms", integer(0), "first wait before a retry, doubled per attempt"))
    retry_backoff_max_ms: int = field(default=1_000, metadata=setting(
        "retry.backoff.max.ms", integer(0), "the cap on a retry's wait"))
    reconnect_backoff_ms: int = field(default=50, metadata=setting(
        "reconnect.backoff.ms", integer(0), "first wait before reconnecting to a broker"))
    reconnect_backoff_max_ms: int = field(default=1_000, metadata=setting(
        "reconnect.backoff.max.ms", integer(0), "the cap on a reconnect's wait"))
    socket_connection_setup_timeout_ms: int = field(default=10_000, metadata=setting(
        "socket.connection.setup.timeout.ms", integer(1),
        "connect plus ApiVersions handshake deadline"))
    metadata_max_age_ms: int = field(default=300_000, metadata=setting(
        "metadata.max.age.ms", integer(0), "metadata older than this is refreshed"))
    receive_message_max_bytes: int = field(default=100_000_000, metadata=setting(
        "receive.message.max.bytes", integer(1_000),
        "largest answer read from a broker (librdkafka's name and default), and largest batch "
        "after decompression; a larger one closes the connection before it is read"))
    security_protocol: str = field(default="PLAINTEXT", metadata=setting(
        "security.protocol", _protocol,
        "PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL over TLS)"))
    ssl_ca_location: str | None = field(default=None, metadata=setting(
        "ssl.ca.location", _file,
        "PEM file of the CA certificates that sign the brokers' (default: the system's CAs)"))
    ssl_certificate_location: str | None = field(default=None, metadata=setting(
        "ssl.certificate.location", _file,
        "PEM file of this client's certificate, for mutual TLS (may hold the key too)"))
    ssl_key_location: str | None = field(default=None, metadata=setting(
        "ssl.key.location", _file, "PEM file of this client's private key, for mutual TLS"))
    ssl_key_password: Secret | None = field(default=None, metadata=setting(
        "ssl.key.password", secret, "the private key's passphrase (kept as a Secret)"))
    ssl_endpoint_identification_algorithm: str = field(default="https", metadata=setting(
        "ssl.endpoint.identification.algorithm", choice("https", "none"),
        "https: the broker's certificate must name the host connected to; none: not checked"))
    ssl_context: ssl.SSLContext | None = field(default=None, metadata=setting(
        "ssl.context", _ssl_context,
        "an ssl.SSLContext used as it is, instead of the ssl.* settings (eosclient)"))
    sasl_mechanism: str | None = field(default=None, metadata=setting(
        "sasl.mechanism", _mechanism,
        "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (librdkafka's alias: "
        "sasl.mechanisms)"))
    sasl_username: str | None = field(default=None, metadata=setting(
        "sasl.username", text(optional=True), "the SASL user (PLAIN and SCRAM)"))
    sasl_password: Secret | None = field(default=None, metadata=setting(
        "sasl.password", secret, "the SASL password (PLAIN and SCRAM; kept as a Secret)"))
    oauth_cb: Callable[[str | None], Any] | None = field(default=None, metadata=setting(
        "oauth_cb", function(optional=True),
        "OAUTHBEARER: (sasl.oauthbearer.config) -> (token, expiry in epoch seconds), called "
        "again before the token expires (confluent-kafka's oauth_cb)"))
    sasl_oauthbearer_config: str | None = field(default=None, metadata=setting(
        "sasl.oauthbearer.config", text(optional=True), "passed to oauth_cb as it is"))
    statistics_interval_ms: int = field(default=0, metadata=setting(
        "statistics.interval.ms", integer(0),
        "how often stats_cb is called with a stats() snapshot; 0: never (librdkafka's name)"))
    stats_cb: Callable[[Any], object] | None = field(default=None, metadata=setting(
        "stats_cb", function(optional=True),
        "(ClientStats) -> None, called every statistics.interval.ms on a thread of its own "
        "(confluent-kafka's stats_cb, given the dataclass rather than JSON)"))

    error_cb: Callable[[Any], object] | None = field(default=None, metadata=setting(
        "error_cb", function(optional=True),
        "(EosError) -> None, called with client-wide errors: AllBrokersDownError when no "
        "broker can be reached, an AuthenticationError; on the client's I/O thread "
        "(librdkafka's error_cb). Without it, a client that never reached a broker raises "
        "AllBrokersDownError from its calls"))

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            object.__setattr__(self, spec.name, spec.metadata["check"](value, spec.name))
        self._check_together()

    def _check_together(self) -> None:
        """Checks across settings; named by Kafka key, as the docs list them."""
        pairs = (("retry.backoff.max.ms", self.retry_backoff_max_ms, self.retry_backoff_ms),
                 ("reconnect.backoff.max.ms", self.reconnect_backoff_max_ms,
                  self.reconnect_backoff_ms))
        for key, top, base in pairs:
            if top < base:
                raise ConfigError(f"must be at least the initial backoff ({base}), got {top}",
                                  key=key)
        if (self.stats_cb is None) != (self.statistics_interval_ms == 0):
            raise ConfigError("stats_cb and statistics.interval.ms go together: one without "
                              "the other would never report", key="stats_cb"
                              if self.stats_cb is not None else "statistics.interval.ms")
        self._check_security()

    @property
    def uses_tls(self) -> bool:
        """Whether connections are wrapped in TLS (SSL or SASL_SSL)."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        """Whether connections log in with SASL (SASL_PLAINTEXT or SASL_SSL)."""
        return self.security_protocol.startswith("SASL_")

    def _check_security(self) -> None:
        """The security settings together: each setting given needs the protocol that uses
        it, and a SASL protocol needs a mechanism with its credentials."""
        protocol = self.security_protocol
        tls: dict[str, object] = {
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": self.ssl_key_password,
            "ssl.context": self.ssl_context}
        if not self.uses_tls:
            for key, value in tls.items():
                if value is not None:
                    raise ConfigError(f"is set but security.protocol is {protocol}; use SSL or "
                                      "SASL_SSL for TLS", key=key)
        if self.ssl_context is not None:
            for key, value in tls.items():
                if value is not None and key != "ssl.context":
                    raise ConfigError("cannot be combined with ssl.context (an SSLContext "
                                      "brings its own CAs and certificates)", key=key)
        if self.ssl_key_location is not None and self.ssl_certificate_location is None:
            raise ConfigError("needs ssl.certificate.location (mutual TLS sends both)",
                              key="ssl.key.location")
        if self.ssl_key_password is not None and self.ssl_certificate_location is None:
            raise ConfigError("needs ssl.certificate.location", key="ssl.key.password")
        sasl: dict[str, object] = {
            "sasl.mechanism": self.sasl_mechanism, "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password, "oauth_cb": self.oauth_cb}
        if not self.uses_sasl:
            for key, value in sasl.items():
                if value is not None:
                    raise ConfigError(f"is set but security.protocol is {protocol}; use "
                                      "SASL_PLAINTEXT or SASL_SSL for SASL", key=key)
            return
        mechanism = self.sasl_mechanism
        if mechanism is None:
            raise ConfigError(f"is required with security.protocol {protocol} (PLAIN, "
                              "SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)", key="sasl.mechanism")
        if mechanism == "OAUTHBEARER":
            if self.oauth_cb is None:
                raise ConfigError("is required with sasl.mechanism OAUTHBEARER", key="oauth_cb")
            return
        for key, value in (("sasl.username", self.sasl_username),
                           ("sasl.password", self.sasl_password)):
            if value is None:
                raise ConfigError(f"is required with sasl.mechanism {mechanism}", key=key)

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Kafka key -> attribute name, for every setting of this class."""
        return {f.metadata["key"]: f.name for f in dataclasses.fields(cls)}

    @classmethod
    def from_kafka(cls: type[_C], config: Mapping[str, object]) -> _C:
        """Build from Kafka's dotted keys alone (``{"bootstrap.servers": ..., ...}``).

        Raises:
            ConfigError: an unknown key, a wrong type or an out-of-range value.
        """
        return build(cls, {}, config)


@dataclass(frozen=True, kw_only=True, slots=True)
class ProducerConfig(ClientConfig):
    """The producer's settings; Kafka's names and defaults unless noted.

    Raises:
        ConfigError: a setting is of the wrong type or out of range (``.key`` names it).
    """

    transactional_id: str | None = field(default=None, metadata=setting(
        "transactional.id", text(optional=True), "None makes an idempotent producer"))
    transaction_timeout_ms: int = field(default=60_000, metadata=setting(
        "transaction.timeout.ms", integer(1), "sent with InitProducerId"))
    acks: int = field(default=-1, metadata=setting("acks", _acks, "must be all (-1)"))
    enable_idempotence: bool = field(default=True, metadata=setting(
        "enable.idempotence", _idempotence, "must be True"))
    linger_ms: float = field(default=5.0, metadata=setting(
        "linger.ms", number(0.0), "how long a batch that is not full waits for more records"))
    batch_size: int = field(default=1_000_000, metadata=setting(
        "batch.size", integer(1),
        "bytes per batch, uncompressed (librdkafka's default; buffer.memory counts what fills)"))
    max_request_size: int = field(default=1_048_576, metadata=setting(
        "max.request.size", integer(1), "largest record, and the byte budget of one request"))
    compression_type: str = field(default="none", metadata=setting(
        "compression.type", _compression, "none, gzip, snappy, lz4 or zstd"))
    delivery_timeout_ms: int = field(default=120_000, metadata=setting(
        "delivery.timeout.ms", integer(1), "from send() to giving up on a record"))
    max_in_flight_requests_per_connection: int = field(default=5, metadata=setting(
        "max.in.flight.requests.per.connection", integer(1, _MAX_IN_FLIGHT),
        "Produce requests in flight per broker (and batches per partition), at most 5"))
    buffer_memory: int = field(default=33_554_432, metadata=setting(
        "buffer.memory", integer(1),
        "bytes of batches not yet acknowledged; send() waits up to max.block.ms beyond it"))
    max_block_ms: int = field(default=60_000, metadata=setting(
        "max.block.ms", integer(0),
        "default timeout of blocking calls and of waiting for a topic's metadata in send()"))
    partitioner: Partitioner = field(default=default_partitioner, metadata=setting(
        "partitioner", function(),
        "(topic, key bytes, partitions) -> partition, or None for the sticky partition"))
    key_serializer: Serializer | None = field(default=None, metadata=setting(
        "key.serializer", function(optional=True), "key object -> bytes"))
    value_serializer: Serializer | None = field(default=None, metadata=setting(
        "value.serializer", function(optional=True), "value object -> bytes"))

    @property
    def transactional(self) -> bool:
        """Whether a transactional.id is set (False: an idempotent producer)."""
        return self.transactional_id is not None

    def _check_together(self) -> None:
        ClientConfig._check_together(self)
        least = self.linger_ms + self.request_timeout_ms
        if self.delivery_timeout_ms < least:
            raise ConfigError(
                f"must be at least linger.ms + request.timeout.ms ({least:g}), got "
                f"{self.delivery_timeout_ms}", key="delivery.timeout.ms")


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsumerConfig(ClientConfig):
    """The read_committed consumer's settings; Kafka's names and defaults unless noted.

    Raises:
        ConfigError: a setting is of the wrong type or out of range (``.key`` names it).
    """

    group_id: str | None = field(default=None, metadata=setting(
        "group.id", text(optional=True),
        "the consumer group; needed by subscribe(), commit() and committed()"))
    group_instance_id: str | None = field(default=None, metadata=setting(
        "group.instance.id", text(optional=True),
        "KIP-345 static member id, unique in the group: a restart within session.timeout.ms "
        "keeps the member's partitions; close() does not leave the group"))
    isolation_level: str = field(default="read_committed", metadata=setting(
        "isolation.level", choice("read_committed", "read_uncommitted"),
        "read_committed delivers committed records below the LSO only"))
    auto_offset_reset: str = field(default="latest", metadata=setting(
        "auto.offset.reset", choice("earliest", "latest", "none"),
        "where to start without a committed offset (latest = the LSO under read_committed)"))
    enable_auto_commit: bool = field(default=False, metadata=setting(
        "enable.auto.commit", _no_auto_commit, "must be False"))
    fetch_min_bytes: int = field(default=1, metadata=setting(
        "fetch.min.bytes", integer(0),
        "a Fetch waits for this many bytes (up to fetch.max.wait.ms)"))
    fetch_max_wait_ms: int = field(default=500, metadata=setting(
        "fetch.max.wait.ms", integer(0), "how long a broker may hold a Fetch for fetch.min.bytes"))
    fetch_max_bytes: int = field(default=52_428_800, metadata=setting(
        "fetch.max.bytes", integer(1, _INT32_MAX - _FETCH_OVERHEAD),
        "bytes one Fetch answer may carry (the first batch comes whole, KIP-74); at most "
        "receive.message.max.bytes - 512; halved per node after an answer over that"))
    max_partition_fetch_bytes: int = field(default=1_048_576, metadata=setting(
        "max.partition.fetch.bytes", integer(1),
        "bytes per partition per Fetch (the first batch comes whole, KIP-74), and the prefetch "
        "buffer per partition; halved per node after an answer over receive.message.max.bytes"))
    queued_max_messages_kbytes: int = field(default=65_536, metadata=setting(
        "queued.max.messages.kbytes", integer(1, 2_097_151),
        "KiB of fetched data waiting for poll(), all partitions together, past which nothing "
        "more is fetched until poll() takes some (librdkafka's meaning; an answer per leader "
        "may still be on its way): with max.partition.fetch.bytes per partition, the prefetch "
        "bound"))
    max_poll_records: int = field(default=500, metadata=setting(
        "max.poll.records", integer(1), "poll()'s default max_records"))
    max_poll_interval_ms: int = field(default=300_000, metadata=setting(
        "max.poll.interval.ms", integer(1),
        "leave the group if poll() is not called for this long; also the rebalance timeout"))
    session_timeout_ms: int = field(default=45_000, metadata=setting(
        "session.timeout.ms", integer(1), "the coordinator drops a member silent for this long"))
    heartbeat_interval_ms: int = field(default=3_000, metadata=setting(
        "heartbeat.interval.ms", integer(1), "time between heartbeats"))
    partition_assignment_strategy: tuple[str, ...] = field(
        default=("range", "roundrobin"), metadata=setting(
            "partition.assignment.strategy", _assignors,
            "assignors offered when joining, preferred first: range, roundrobin, sticky, "
            "cooperative-sticky (KIP-429's cooperative protocol when it is the only one offered; "
            "beside an eager one, the member stays eager: the upgrade's first step)"))
    default_api_timeout_ms: int = field(default=60_000, metadata=setting(
        "default.api.timeout.ms", integer(0),
        "the default timeout of blocking calls (position, commit, committed, close, ...)"))
    max_held_bytes: int = field(default=DEFAULT_MAX_HELD_BYTES, metadata=setting(
        "read.committed.max.held.bytes", integer(1),
        "per partition: transactional data held for its marker before scanning (eosclient)"))
    check_crcs: bool = field(default=True, metadata=setting(
        "check.crcs", boolean,
        "verify the CRC-32C of every fetched record batch (librdkafka's meaning). Java's default, "
        "not librdkafka's False: about 40 us per MB fetched (1-13% of decoding it), and a "
        "corrupt batch (a transaction marker among them) fails poll() instead of being misread. "
        "False decodes such a batch anyway (its framing is still checked): for brokers that "
        "write bad CRCs, as librdkafka's mock does in its control batches"))
    key_deserializer: Deserializer | None = field(default=None, metadata=setting(
        "key.deserializer", function(optional=True),
        "key bytes -> object (not called for a null key); None delivers bytes"))
    value_deserializer: Deserializer | None = field(default=None, metadata=setting(
        "value.deserializer", function(optional=True),
        "value bytes -> object (not called for a tombstone); None delivers bytes"))

    @property
    def read_committed(self) -> bool:
        """Whether the isolation level is read_committed."""
        return self.isolation_level == "read_committed"

    def _check_together(self) -> None:
        ClientConfig._check_together(self)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(f"must be below session.timeout.ms ({self.session_timeout_ms}), "
                              f"got {self.heartbeat_interval_ms}", key="heartbeat.interval.ms")
        if self.fetch_max_bytes + _FETCH_OVERHEAD > self.receive_message_max_bytes:
            # librdkafka's rule: a whole answer must fit, with room for its headers.
            most = self.receive_message_max_bytes - _FETCH_OVERHEAD
            raise ConfigError(
                f"must be at most receive.message.max.bytes - {_FETCH_OVERHEAD} ({most}), got "
                f"{self.fetch_max_bytes}; raise receive.message.max.bytes with it",
                key="fetch.max.bytes")
        if self.fetch_max_wait_ms >= self.request_timeout_ms:
            raise ConfigError(f"must be below request.timeout.ms ({self.request_timeout_ms}), "
                              f"got {self.fetch_max_wait_ms}", key="fetch.max.wait.ms")


@dataclass(frozen=True, kw_only=True, slots=True)
class AdminConfig(ClientConfig):
    """The admin client's settings (:class:`~eosclient.Admin`).

    Raises:
        ConfigError: a setting is of the wrong type or out of range (``.key`` names it).
    """

    default_api_timeout_ms: int = field(default=60_000, metadata=setting(
        "default.api.timeout.ms", integer(0),
        "the default timeout of each Admin call, all its requests and retries together"))


def build(cls: type[_C], given: Mapping[str, object],
          config: Mapping[str, object] | _C | None) -> _C:
    """A config of ``cls`` from keyword settings and a dict of Kafka's dotted keys (a client's
    constructor: its keywords and its ``config``).

    Args:
        cls: :class:`ProducerConfig` (or another :class:`ClientConfig`).
        given: Attribute name -> value for the keywords the caller passed (None values are
            taken as "not given" and skipped).
        config: Kafka key -> value, or None; or a whole ``cls``, taken as it is (then no
            keyword may be given).

    Returns:
        The config, every setting checked.

    Raises:
        ConfigError: an unknown key (the nearest known one suggested), a key given as both a
            keyword and a dotted key with different values, a wrong type or a bad value; or a
            whole ``cls`` and keywords both.
    """
    if isinstance(config, cls):
        extra = sorted(k for k, v in given.items() if v is not None)
        if extra:
            raise ConfigError(f"pass settings either in the {cls.__name__} or as keywords, "
                              f"not both: {', '.join(extra)}", key=extra[0])
        return config
    keys = {**cls.keys(), **{a: cls.keys()[k] for a, k in _ALIASES.items()}}
    specs = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, object] = {}
    spelled: dict[str, str] = {}
    for name, value in given.items():
        if value is not None:
            values[name] = specs[name].metadata["check"](value, name)
            spelled[name] = name
    pairs = cast("Mapping[str, object] | None", config)  # (a whole cls returned above)
    for key, value in (pairs or {}).items():
        target = keys.get(key) if isinstance(key, str) else None
        if target is None:
            raise ConfigError(_unknown(key, keys), key=str(key))
        checked = specs[target].metadata["check"](value, key)
        if target in values and values[target] != checked:
            shown = ((values[target], value) if specs[target].metadata["check"] is not secret
                     else ("***", "***"))
            raise ConfigError(f"given twice with different values: {spelled[target]}="
                              f"{shown[0]!r} and {key!r}: {shown[1]!r}", key=key)
        values[target], spelled[target] = checked, key
    try:
        return cls(**values)  # type: ignore[arg-type]
    except TypeError as exc:  # a required setting is missing
        missing = [k for k, n in keys.items() if specs[n].default is dataclasses.MISSING
                   and n not in values]
        raise ConfigError(f"is required ({exc})", key=missing[0] if missing else "?") from None


#: Other spellings of a key that librdkafka accepts; same setting, same check.
_ALIASES: Mapping[str, str] = {"sasl.mechanisms": "sasl.mechanism"}


def _unknown(key: object, keys: Mapping[str, str]) -> str:
    if not isinstance(key, str):
        return f"setting keys are str, got {_type_name(key)}"
    candidates = [*keys, *keys.values()]
    near = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    hint = ""
    if near:
        suggestion = near[0] if near[0] in keys else next(k for k, n in keys.items()
                                                           if n == near[0])
        hint = f"; did you mean {suggestion!r}?"
    return f"unknown setting {key!r}{hint}"
