"""Security without a broker: the settings and their checks, secrets kept out of sight, the SASL
conversations (client against the test front's server side, bytes in and out), token refresh."""

from __future__ import annotations

import logging
import pickle
import ssl
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from eosclient import (
    ConfigError,
    FatalError,
    ProducerConfig,
    ReadCommittedConsumer,
    SaslAuthenticationError,
    TransactionalProducer,
)
from eosclient._net.security import TokenSource, security_for
from eosclient._protocol.sasl import OAuthBearer, Plain, SaslLogin, Scram
from eosclient.config import Secret, build
from eosclient.errors import ApiKey, AuthenticationError, classify
from eosclient.testing.security import SaslUsers, make_certificates

SERVERS = "127.0.0.1:9092"
PASSWORD = "hunter2-very-secret"


def config(settings: dict[str, Any] | None = None, **given: Any) -> ProducerConfig:
    given.setdefault("bootstrap_servers", SERVERS)
    return build(ProducerConfig, given, settings)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_certificates(tmp_path_factory.mktemp("certs"))


# -- settings ---------------------------------------------------------------------------------


def test_plaintext_is_the_default() -> None:
    cfg = config()
    assert cfg.security_protocol == "PLAINTEXT" and not cfg.uses_tls and not cfg.uses_sasl
    assert cfg.ssl_endpoint_identification_algorithm == "https"
    assert security_for(cfg).tls is None and security_for(cfg).login is None


def test_dotted_keys_and_keywords_agree() -> None:
    dotted = config({"security.protocol": "sasl_ssl", "sasl.mechanisms": "scram-sha-512",
                     "sasl.username": "u", "sasl.password": PASSWORD})
    keywords = config(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                      sasl_username="u", sasl_password=PASSWORD)
    assert dotted == keywords
    assert dotted.sasl_mechanism == "SCRAM-SHA-512"  # librdkafka's alias, normalised
    assert dotted.sasl_password == Secret(PASSWORD)


@pytest.mark.parametrize(("settings", "key"), [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.username"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.username": "u"}, "sasl.password"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}, "oauth_cb"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism"),
    ({"sasl.mechanism": "PLAIN"}, "sasl.mechanism"),  # SASL settings, no SASL protocol
    ({"ssl.ca.location": __file__}, "ssl.ca.location"),  # TLS settings, no TLS protocol
    ({"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"}, "ssl.ca.location"),
    ({"security.protocol": "SSL", "ssl.key.location": __file__}, "ssl.key.location"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "http"},
     "ssl.endpoint.identification.algorithm"),
    ({"security.protocol": "SSL", "ssl.context": "not a context"}, "ssl.context"),
    ({"security.protocol": "SSL", "ssl.context": ssl.create_default_context(),
      "ssl.ca.location": __file__}, "ssl.ca.location"),
])
def test_bad_security_settings_fail_at_construction_naming_the_key(
        settings: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config(settings)
    assert raised.value.key == key


def test_an_unloadable_client_key_is_a_config_error_at_construction(certs: Any) -> None:
    # A wrong passphrase used to be found, if ever, by the I/O thread at the first connect.
    cfg = config({"security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
                  "ssl.certificate.location": str(certs.client_cert),
                  "ssl.key.location": str(certs.client_key), "ssl.key.password": PASSWORD})
    with pytest.raises(ConfigError) as raised:
        security_for(cfg)
    assert raised.value.key == "ssl.key.password" and PASSWORD not in str(raised.value)
    with pytest.raises(ConfigError):
        TransactionalProducer(config={"bootstrap.servers": SERVERS, "security.protocol": "SSL",
                                      "ssl.ca.location": str(certs.ca),
                                      "ssl.certificate.location": str(certs.client_cert),
                                      "ssl.key.location": str(certs.client_key),
                                      "ssl.key.password": PASSWORD})


def test_the_tls_context_verifies_by_default(certs: Any) -> None:
    context = security_for(config({"security.protocol": "SSL",
                                   "ssl.ca.location": str(certs.ca)})).tls
    assert context is not None and context.check_hostname
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    lax = security_for(config({"security.protocol": "SSL",
                               "ssl.endpoint.identification.algorithm": "none"})).tls
    assert lax is not None and not lax.check_hostname and lax.verify_mode is ssl.CERT_REQUIRED
    own = ssl.create_default_context()
    assert security_for(config(security_protocol="SSL", ssl_context=own)).tls is own


# -- secrets ----------------------------------------------------------------------------------


def test_secrets_never_show(caplog: pytest.LogCaptureFixture) -> None:
    cfg = config(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u",
                 sasl_password=PASSWORD)
    logging.getLogger("test").warning("config: %s %r", cfg, cfg)
    for text in (repr(cfg), str(cfg), caplog.text, repr(cfg.sasl_password),
                 str(cfg.sasl_password), repr(pickle.loads(pickle.dumps(cfg)))):
        assert PASSWORD not in text
    assert cfg.sasl_password is not None and cfg.sasl_password.reveal() == PASSWORD


@pytest.mark.parametrize("settings", [
    # given twice with different values: the message quotes neither
    {"sasl.password": PASSWORD + "-other"},
    # a wrong type: the message names the type only
    {"ssl.key.password": 12345678},
])
def test_config_errors_do_not_quote_secrets(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as raised:
        config(settings, security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
               sasl_username="u", sasl_password=PASSWORD)
    assert PASSWORD not in str(raised.value) and "12345678" not in str(raised.value)


def test_mechanisms_do_not_show_credentials() -> None:
    for mechanism in (Plain("u", PASSWORD), Scram("SCRAM-SHA-256", "u", PASSWORD),
                      OAuthBearer(PASSWORD)):
        assert PASSWORD not in repr(mechanism)


# -- SASL conversations, sans-IO ---------------------------------------------------------------


def converse(login: SaslLogin, users: SaslUsers, version: int = 1) -> int:
    """Run ``login`` against the test front's server side; return the number of requests."""
    session = users.session()
    request = login.start()
    count = 0
    while request is not None:
        count += 1
        key = request.API_KEY
        fields = session.answer(key, version if key == ApiKey.SASL_AUTHENTICATE else 1, request)
        cls = SaslHandshakeResponse if key == ApiKey.SASL_HANDSHAKE else SaslAuthenticateResponse
        response = cls(version=version if key == ApiKey.SASL_AUTHENTICATE else 1, **fields)
        request = login.on_response(response)
    return count


@pytest.mark.parametrize(("mechanism", "requests"), [
    ("PLAIN", 2), ("SCRAM-SHA-256", 3), ("SCRAM-SHA-512", 3)])
def test_a_login_succeeds_with_the_right_password(mechanism: str, requests: int) -> None:
    users = SaslUsers({"alice": PASSWORD}, mechanisms=[mechanism], session_lifetime_ms=60_000)
    make = Plain if mechanism == "PLAIN" else (lambda u, p: Scram(mechanism, u, p))
    login = SaslLogin(make("alice", PASSWORD))
    assert converse(login, users) == requests
    assert login.done and login.session_lifetime_ms == 60_000
    assert users.logins == [(mechanism, "alice")]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", PASSWORD)])
def test_a_refused_login_raises_sasl_authentication_failed(mechanism: str, user: str,
                                                           password: str) -> None:
    users = SaslUsers({"alice": PASSWORD}, mechanisms=[mechanism])
    make = Plain if mechanism == "PLAIN" else (lambda u, p: Scram(mechanism, u, p))
    with pytest.raises(SaslAuthenticationError) as raised:
        converse(SaslLogin(make(user, password)), users)
    assert raised.value.code == 58 and raised.value.api == ApiKey.SASL_AUTHENTICATE
    assert PASSWORD not in str(raised.value)
    assert isinstance(raised.value, AuthenticationError | FatalError)


def test_a_server_without_the_password_is_caught_by_scram() -> None:
    # The server's final message proves it knows the password; one that does not is refused.
    client = Scram("SCRAM-SHA-256", "alice", PASSWORD)
    users = SaslUsers({"alice": "another-password"}, mechanisms=["SCRAM-SHA-256"])
    server = users.scram_server("SCRAM-SHA-256")
    server.set_client_first(client.first().decode())
    client.step(server.get_server_first().encode())  # our client-final, never sent here
    with pytest.raises(SaslAuthenticationError):
        client.step(b"v=" + b"A" * 44)  # a signature made without our password


def test_an_unsupported_mechanism_names_the_enabled_ones() -> None:
    users = SaslUsers({"alice": PASSWORD}, mechanisms=["SCRAM-SHA-512"])
    with pytest.raises(SaslAuthenticationError) as raised:
        converse(SaslLogin(Plain("alice", PASSWORD)), users)
    assert raised.value.code == 33 and "SCRAM-SHA-512" in str(raised.value)


def test_oauthbearer_sends_the_token_and_answers_an_error_challenge() -> None:
    users = SaslUsers({}, mechanisms=["OAUTHBEARER"], tokens=["good"])
    assert converse(SaslLogin(OAuthBearer("good")), users) == 2
    with pytest.raises(SaslAuthenticationError) as raised:
        converse(SaslLogin(OAuthBearer("bad")), users)
    assert raised.value.code == 58


def test_sasl_errors_are_classified_as_authentication() -> None:
    for api, code in ((ApiKey.SASL_AUTHENTICATE, 58), (ApiKey.SASL_HANDSHAKE, 33)):
        assert classify(api, code) is SaslAuthenticationError


# -- OAUTHBEARER tokens ----------------------------------------------------------------------


def test_tokens_are_fetched_again_at_80_percent_of_their_lifetime() -> None:
    now = [1000.0]
    issued: list[str] = []

    def oauth_cb(argument: str | None) -> tuple[str, float]:
        issued.append(f"t{len(issued)}")
        return issued[-1], now[0] + 100

    source = TokenSource(oauth_cb, "cfg", clock=lambda: now[0])
    assert source.token()[0] == "t0"
    now[0] += 79
    assert source.token()[0] == "t0"
    now[0] += 2  # 81 s into a 100 s token
    assert source.token()[0] == "t1" and source.calls == 2


def test_a_bad_oauth_cb_answer_is_refused() -> None:
    with pytest.raises(ValueError, match="oauth_cb must return"):
        TokenSource(lambda _: "just a token", None).token()


def test_the_consumer_takes_the_security_keywords(tmp_path: Path) -> None:
    consumer = ReadCommittedConsumer(SERVERS, security_protocol="SASL_PLAINTEXT",
                                     sasl_mechanism="PLAIN", sasl_username="u",
                                     sasl_password=PASSWORD)
    try:
        assert consumer.config.uses_sasl and PASSWORD not in repr(consumer.config)
    finally:
        consumer.close()
