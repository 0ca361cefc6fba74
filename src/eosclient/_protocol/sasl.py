"""The client side of Kafka's SASL login, without I/O: requests out, responses in.

Theory of operation
-------------------
A SASL connection opens with ApiVersions as every connection does, then logs in before any
other request (KIP-43, KIP-152)::

    SaslHandshake(mechanism)  -> the broker says whether it enables it (33 if not)
    SaslAuthenticate(bytes)   -> the broker's next challenge, until the mechanism is done
    ...                          (58 SASL_AUTHENTICATION_FAILED at any step ends it)

:class:`SaslLogin` is that conversation: :meth:`SaslLogin.start` gives the SaslHandshake request,
:meth:`SaslLogin.on_response` takes each answer and gives the next request, or None once the
login succeeded. A refusal raises :class:`~eosclient.errors.SaslAuthenticationError` with the
broker's message; a password or token is never part of a message.

Mechanisms are tiny state machines over bytes (:class:`Mechanism`): PLAIN (RFC 4616, one
message), SCRAM-SHA-256/512 (RFC 5802/7677, done by the ``scramp`` library: client-first,
client-final, then the server's signature is checked, so a broker that does not know the
password is caught too) and OAUTHBEARER (RFC 7628 with a token from ``oauth_cb``; KIP-255).

Session lifetime (KIP-368): SaslAuthenticate v1+ answers with ``session_lifetime_ms``; past it
the broker closes the connection. :attr:`SaslLogin.session_lifetime_ms` hands it to the
connection, which logs in again on the same connection before it ends
(:mod:`eosclient._net.node`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import scramp
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from eosclient.errors import ApiKey, SaslAuthenticationError, error_for

__all__ = ["Mechanism", "OAuthBearer", "Plain", "SaslLogin", "Scram"]


class Mechanism(Protocol):
    """One SASL mechanism's client side: bytes to send for each server message."""

    name: str

    def first(self) -> bytes:
        """The client's first message."""
        ...

    def step(self, challenge: bytes) -> bytes | None:
        """The answer to the server's ``challenge``; None once the mechanism is done.

        Raises:
            SaslAuthenticationError: the server's message proves the login failed.
        """
        ...


class Plain:
    """PLAIN (RFC 4616): ``\\0user\\0password`` once; meant for TLS connections only."""

    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._message = b"\0" + username.encode() + b"\0" + password.encode()

    def first(self) -> bytes:
        return self._message

    def step(self, challenge: bytes) -> bytes | None:
        return None

    def __repr__(self) -> str:
        return "Plain(***)"


class Scram:
    """SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) through ``scramp``."""

    def __init__(self, name: str, username: str, password: str) -> None:
        self.name = name
        self._client = scramp.ScramClient([name], username, password)
        self._stage = 0

    def first(self) -> bytes:
        first: str = self._client.get_client_first()
        return first.encode()

    def step(self, challenge: bytes) -> bytes | None:
        self._stage += 1
        try:
            if self._stage == 1:
                self._client.set_server_first(challenge.decode())
                final: str = self._client.get_client_final()
                return final.encode()
            self._client.set_server_final(challenge.decode())
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            # A bad server signature: the broker does not hold this user's credentials (or
            # something in between is not the broker).
            raise SaslAuthenticationError(f"{self.name}: the broker's answer failed "
                                          f"verification ({exc})",
                                          api=ApiKey.SASL_AUTHENTICATE) from None
        return None

    def __repr__(self) -> str:
        return f"Scram({self.name}, ***)"


class OAuthBearer:
    """OAUTHBEARER (RFC 7628): the GS2 header and ``auth=Bearer <token>``.

    A broker that refuses the token answers with an error challenge (JSON); the client must
    then send a lone ``\\x01``, after which the broker fails the login with code 58.
    """

    name = "OAUTHBEARER"

    def __init__(self, token: str, extensions: dict[str, str] | None = None) -> None:
        pairs = "".join(f"{k}={v}\x01" for k, v in sorted((extensions or {}).items()))
        self._message = f"n,,\x01auth=Bearer {token}\x01{pairs}\x01".encode()
        self._refused = False

    def first(self) -> bytes:
        return self._message

    def step(self, challenge: bytes) -> bytes | None:
        if challenge and not self._refused:
            self._refused = True
            return b"\x01"
        return None

    def __repr__(self) -> str:
        return "OAuthBearer(***)"


class SaslLogin:
    """One SASL login on one connection: SaslHandshake, then SaslAuthenticate until done.

    Args:
        mechanism: The mechanism, with its credentials.
    """

    def __init__(self, mechanism: Mechanism) -> None:
        self.mechanism = mechanism
        self.session_lifetime_ms = 0  # 0: the broker sets none (KIP-368)
        self.done = False

    def start(self) -> Any:
        """The SaslHandshake request that opens the login (v1: SaslAuthenticate follows)."""
        return SaslHandshakeRequest(mechanism=self.mechanism.name)

    def on_response(self, response: Any) -> Any:
        """Take the broker's answer; return the next request, or None once logged in.

        Raises:
            SaslAuthenticationError: the broker refused the mechanism or the credentials;
                the connection must be closed, and the login is not retried.
        """
        if response.API_KEY == ApiKey.SASL_HANDSHAKE:
            if response.error_code:
                enabled = ", ".join(response.mechanisms or []) or "none"
                raise _refused(ApiKey.SASL_HANDSHAKE, response.error_code,
                               f"the broker does not enable {self.mechanism.name}; it enables "
                               f"{enabled}")
            return _authenticate(self.mechanism.first())
        if response.error_code:
            raise _refused(ApiKey.SASL_AUTHENTICATE, response.error_code,
                           response.error_message)
        self.session_lifetime_ms = getattr(response, "session_lifetime_ms", 0) or 0
        reply = self.mechanism.step(bytes(response.auth_bytes or b""))
        if reply is None:
            self.done = True
            return None
        return _authenticate(reply)


def _authenticate(data: bytes) -> Any:
    return SaslAuthenticateRequest(auth_bytes=data)


def _refused(api: ApiKey, code: int, message: str | None) -> SaslAuthenticationError:
    generic = error_for(api, code, message)
    error = SaslAuthenticationError(str(generic), code=code, code_name=generic.code_name,
                                    api=api)
    return error


def mechanism_factory(name: str, username: str | None, password: str | None,
                      token: Callable[[], tuple[str, dict[str, str]]] | None,
                      ) -> Callable[[], Mechanism]:
    """A maker of fresh :class:`Mechanism` objects, one per login (a SCRAM nonce is single use).

    Args:
        name: ``sasl.mechanism`` (upper case).
        username: ``sasl.username`` (PLAIN, SCRAM).
        password: ``sasl.password`` revealed (PLAIN, SCRAM).
        token: For OAUTHBEARER: returns the current token and its SASL extensions.
    """
    if name == "OAUTHBEARER":
        assert token is not None
        return lambda: OAuthBearer(*token())
    assert username is not None and password is not None
    if name == "PLAIN":
        return lambda: Plain(username, password)
    return lambda: Scram(name, username, password)
