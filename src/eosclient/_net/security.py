"""What a connection needs to be secure, made once per client from its settings.

:func:`security_for` turns ``security.protocol``, ``ssl.*`` and ``sasl.*`` into a
:class:`Security`: the :class:`ssl.SSLContext` to wrap sockets in (None for plaintext) and a
maker of SASL logins (None without SASL). It runs when the client is built, so certificates and
keys that cannot be loaded (a wrong ``ssl.key.password``, a key that is not the certificate's)
are a :class:`~eosclient.errors.ConfigError` at construction, not a failure on the I/O thread.

TLS defaults follow librdkafka's and Python's: the broker's certificate is verified against
``ssl.ca.location`` (else the system's CAs), its host name checked
(``ssl.endpoint.identification.algorithm=https``), TLS 1.2 at least.

OAUTHBEARER tokens come from the application's ``oauth_cb`` (confluent-kafka's signature:
``oauth_cb(sasl.oauthbearer.config) -> (token, expiry in epoch seconds[, principal,
extensions])``). :class:`TokenSource` calls it on the I/O thread when a login needs a token and
the last one has lived 80% of its lifetime (librdkafka's refresh point), so a token is refreshed
before it expires and every new login (a new connection, a KIP-368 re-login) sends a valid one.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eosclient._protocol.sasl import Mechanism, mechanism_factory
from eosclient.config import ClientConfig
from eosclient.errors import ConfigError

__all__ = ["Security", "TokenSource", "security_for", "tls_context"]

_REFRESH_AT = 0.8  # of a token's lifetime


@dataclass(frozen=True, slots=True)
class Security:
    """How connections of one client are secured.

    Attributes:
        tls: The context to wrap each socket in; None for PLAINTEXT and SASL_PLAINTEXT.
        login: Makes the SASL mechanism for one login; None without SASL.
    """

    tls: ssl.SSLContext | None = None
    login: Callable[[], Mechanism] | None = None


PLAINTEXT = Security()


def security_for(config: ClientConfig) -> Security:
    """The :class:`Security` of a client with ``config``.

    Raises:
        ConfigError: a certificate or key cannot be loaded (the key named; never a password).
    """
    tls = tls_context(config) if config.uses_tls else None
    login = None
    if config.uses_sasl:
        assert config.sasl_mechanism is not None  # checked by the config
        password = config.sasl_password.reveal() if config.sasl_password else None
        token = None
        if config.sasl_mechanism == "OAUTHBEARER":
            assert config.oauth_cb is not None
            token = TokenSource(config.oauth_cb, config.sasl_oauthbearer_config).token
        login = mechanism_factory(config.sasl_mechanism, config.sasl_username, password, token)
    return Security(tls, login)


def tls_context(config: ClientConfig) -> ssl.SSLContext:
    """The client-side TLS context for ``config`` (its ``ssl_context`` when given).

    Raises:
        ConfigError: the CA file, the certificate or the key cannot be loaded.
    """
    if config.ssl_context is not None:
        return config.ssl_context
    try:
        context = ssl.create_default_context(cafile=config.ssl_ca_location)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"cannot load CA certificates from {config.ssl_ca_location!r}: "
                          f"{_reason(exc)}", key="ssl.ca.location") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.ssl_endpoint_identification_algorithm == "none":
        context.check_hostname = False  # the chain is still verified
    if config.ssl_certificate_location is not None:
        password = config.ssl_key_password.reveal() if config.ssl_key_password else None
        try:
            context.load_cert_chain(config.ssl_certificate_location,
                                    config.ssl_key_location, password=password)
        except (ssl.SSLError, OSError) as exc:
            key = "ssl.key.password" if password is not None else "ssl.key.location"
            raise ConfigError(f"cannot load the client certificate "
                              f"{config.ssl_certificate_location!r} with its key "
                              f"{config.ssl_key_location!r}: {_reason(exc)} (a wrong key, or "
                              "a wrong or missing ssl.key.password)", key=key) from None
    return context


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc.__class__.__name__)


class TokenSource:
    """OAUTHBEARER tokens from ``oauth_cb``, fetched again at 80% of their lifetime.

    Args:
        callback: ``oauth_cb``.
        argument: ``sasl.oauthbearer.config``, passed to it as it is.
        clock: Epoch seconds (tests pass their own).
    """

    def __init__(self, callback: Callable[[str | None], Any], argument: str | None,
                 clock: Callable[[], float] = time.time) -> None:
        self._callback = callback
        self._argument = argument
        self._clock = clock
        self._token: tuple[str, dict[str, str]] | None = None
        self._refresh_at = 0.0
        self.calls = 0

    def token(self) -> tuple[str, dict[str, str]]:
        """The current token and its extensions, from a new call when due.

        Raises:
            ValueError: ``oauth_cb`` returned something that is not ``(token, expiry, ...)``.
            Exception: whatever ``oauth_cb`` raised (the login is then retried later).
        """
        now = self._clock()
        if self._token is None or now >= self._refresh_at:
            answer = self._callback(self._argument)
            self.calls += 1
            if not (isinstance(answer, tuple) and len(answer) >= 2
                    and isinstance(answer[0], str) and answer[0]
                    and isinstance(answer[1], int | float)):
                raise ValueError("oauth_cb must return (token str, expiry epoch seconds"
                                 f"[, principal, extensions]), got a {type(answer).__name__}")
            extensions = answer[3] if len(answer) > 3 and answer[3] else {}
            self._token = (answer[0], dict(extensions))
            self._refresh_at = now + max(0.0, float(answer[1]) - now) * _REFRESH_AT
        return self._token
