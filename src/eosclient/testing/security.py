"""A TLS and SASL front for a real broker, and the throwaway certificates it needs.

Neither broker the tests install from PyPI serves TLS or SASL in a usable way (Tansu 0.6's
``--cert``/``--key`` cannot be given together, its ``--authentication`` answers
``NoSharedMechanism``). So the client's TLS and SASL are tested against this front, which
stands where a secure listener would: it terminates TLS (Python's :mod:`ssl`), speaks the
*server* side of SASL (PLAIN; SCRAM-SHA-256/512 through ``scramp``'s server, so the client's
proof and the server's signature are really checked; OAUTHBEARER with a token check), and
forwards every other request, as bytes, to the real broker behind it. It is the fault proxy
(:class:`~eosclient.testing.proxy.KafkaProxy`) with two more options, so Metadata and
FindCoordinator name the front and clients stay on it.

What a Kafka broker does, the front does too: ApiVersions is answered before the login (and
lists SaslHandshake v0-1 and SaslAuthenticate v0-2), any other request before a login closes the
connection, a refused login answers SASL_AUTHENTICATION_FAILED (58) with Kafka's message, a
mechanism not enabled answers UNSUPPORTED_SASL_MECHANISM (33) with the enabled list, and
SaslAuthenticate v1+ carries ``session_lifetime_ms`` when one is set (KIP-368), the front then
refusing requests on a session that has outlived it, as Kafka closes such a connection.

Example::

    certs = make_certificates(tmp_path)
    users = SaslUsers({"alice": "alice-secret"}, mechanisms=("SCRAM-SHA-256",))
    with KafkaProxy(broker.host, broker.port, ssl_context=certs.server_context(),
                    sasl=users) as front:
        producer = TransactionalProducer(config={
            "bootstrap.servers": front.bootstrap_servers, "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca), "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice", "sasl.password": "alice-secret", ...})
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scramp

__all__ = ["Certificates", "SaslSession", "SaslUsers", "make_certificates"]

_HANDSHAKE = 17
_AUTHENTICATE = 36
_ILLEGAL_SASL_STATE = 34
_UNSUPPORTED_MECHANISM = 33
_AUTHENTICATION_FAILED = 58
ALL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslUsers:
    """The server side's users and mechanisms, shared by every connection of a front.

    Args:
        users: user name -> password (PLAIN and SCRAM).
        mechanisms: The mechanisms enabled.
        tokens: OAUTHBEARER tokens accepted (a token not in it is refused).
        session_lifetime_ms: Sent in SaslAuthenticate v1+ (0: none, KIP-368).
    """

    def __init__(self, users: Mapping[str, str], *,
                 mechanisms: Iterable[str] = ALL_MECHANISMS,
                 tokens: Iterable[str] = (), session_lifetime_ms: int = 0) -> None:
        self.mechanisms = tuple(mechanisms)
        self.tokens = set(tokens)
        self.session_lifetime_ms = session_lifetime_ms
        self._users = dict(users)
        self._scram = {name: scramp.ScramMechanism(name) for name in self.mechanisms
                       if name.startswith("SCRAM-")}
        # SCRAM servers keep salted keys, never the password: as Kafka stores SCRAM users.
        self._auth_info = {(name, user): mech.make_auth_info(password, iteration_count=4096)
                           for name, mech in self._scram.items()
                           for user, password in self._users.items()}
        self.logins: list[tuple[str, str]] = []  # (mechanism, user) of each successful login

    def session(self) -> SaslSession:
        """A new connection's login state."""
        return SaslSession(self)

    def check_plain(self, user: str, password: str) -> bool:
        """Whether PLAIN's credentials are right."""
        return user in self._users and self._users[user] == password

    def scram_server(self, mechanism: str) -> Any:
        """A scramp server for one SCRAM login."""
        def lookup(user: str) -> Any:
            return self._auth_info.get((mechanism, user))
        return self._scram[mechanism].make_server(lookup)


class SaslSession:
    """One connection's SASL state on the server side: answers SaslHandshake and
    SaslAuthenticate, and says whether other requests may pass."""

    def __init__(self, users: SaslUsers) -> None:
        self._users = users
        self._mechanism: str | None = None
        self._scram: Any = None
        self._scram_user = "?"
        self._oauth_refused = False
        self.authenticated = False
        self.expires_at = float("inf")
        self.user: str | None = None

    def allows(self, now: float | None = None) -> bool:
        """Whether a non-SASL request may pass (logged in, session not over)."""
        return self.authenticated and (now or time.monotonic()) < self.expires_at

    def answer(self, api_key: int, version: int, request: Any) -> dict[str, Any]:
        """The response fields for a SaslHandshake or SaslAuthenticate request."""
        if api_key == _HANDSHAKE:
            return self._handshake(request.mechanism)
        fields = self._authenticate(bytes(request.auth_bytes or b""))
        fields.setdefault("error_message", None)
        fields.setdefault("auth_bytes", b"")
        if version >= 1:
            lifetime = self._users.session_lifetime_ms if self.authenticated else 0
            fields["session_lifetime_ms"] = lifetime
        return fields

    def _handshake(self, mechanism: str) -> dict[str, Any]:
        enabled = list(self._users.mechanisms)
        if mechanism not in enabled:
            return {"error_code": _UNSUPPORTED_MECHANISM, "mechanisms": enabled}
        self._mechanism, self._scram, self._oauth_refused = mechanism, None, False
        self.authenticated = False  # a re-login (KIP-368) starts over
        return {"error_code": 0, "mechanisms": enabled}

    def _authenticate(self, data: bytes) -> dict[str, Any]:
        mechanism = self._mechanism
        if mechanism is None:
            return {"error_code": _ILLEGAL_SASL_STATE,
                    "error_message": "SaslAuthenticate before SaslHandshake"}
        if mechanism == "PLAIN":
            return self._plain(data)
        if mechanism == "OAUTHBEARER":
            return self._oauth(data)
        return self._scram_step(mechanism, data)

    def _plain(self, data: bytes) -> dict[str, Any]:
        parts = data.split(b"\0")
        if len(parts) == 3 and self._users.check_plain(parts[1].decode(errors="replace"),
                                                       parts[2].decode(errors="replace")):
            return self._logged_in("PLAIN", parts[1].decode())
        return _failed("Authentication failed: Invalid username or password")

    def _scram_step(self, mechanism: str, data: bytes) -> dict[str, Any]:
        try:
            if self._scram is None:
                self._scram = self._users.scram_server(mechanism)
                first = data.decode()
                self._scram_user = next((part[2:] for part in first.split(",")
                                         if part.startswith("n=")), "?")
                self._scram.set_client_first(first)
                return {"error_code": 0, "auth_bytes": self._scram.get_server_first().encode()}
            self._scram.set_client_final(data.decode())
        except (scramp.ScramException, UnicodeDecodeError):
            return _failed("Authentication failed during authentication due to invalid "
                           f"credentials with SASL mechanism {mechanism}")
        fields = self._logged_in(mechanism, self._scram_user)
        fields["auth_bytes"] = self._scram.get_server_final().encode()
        return fields

    def _oauth(self, data: bytes) -> dict[str, Any]:
        if data == b"\x01" and self._oauth_refused:
            return _failed("Authentication failed: invalid token")
        text = data.decode(errors="replace")
        token = next((kv[len("auth=Bearer "):] for kv in text.split("\x01")
                      if kv.startswith("auth=Bearer ")), None)
        if token is not None and token in self._users.tokens:
            return self._logged_in("OAUTHBEARER", "token")
        self._oauth_refused = True  # RFC 7628: an error challenge, then the client's \x01
        return {"error_code": 0, "auth_bytes": json.dumps({"status": "invalid_token"}).encode()}

    def _logged_in(self, mechanism: str, user: str) -> dict[str, Any]:
        self.authenticated, self.user = True, user
        lifetime = self._users.session_lifetime_ms
        self.expires_at = time.monotonic() + lifetime / 1000 if lifetime else float("inf")
        self._users.logins.append((mechanism, user))
        return {"error_code": 0}


def _failed(message: str) -> dict[str, Any]:
    return {"error_code": _AUTHENTICATION_FAILED, "error_message": message}


# --- certificates -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    """PEM files of a throwaway CA and the certificates it signed (made by
    :func:`make_certificates`; never commit them).

    Attributes:
        ca: The CA's certificate (``ssl.ca.location``).
        server_cert, server_key: The front's certificate (names the given hosts) and key.
        wrong_host_cert, wrong_host_key: Signed by the CA, naming only ``wrong.example``.
        client_cert, client_key: A client certificate for mutual TLS.
        client_key_password: The client key's passphrase.
        other_ca: A CA that signed none of these (an untrusted chain).
        untrusted_cert, untrusted_key: A server certificate signed by ``other_ca``.
    """

    ca: Path
    server_cert: Path
    server_key: Path
    wrong_host_cert: Path
    wrong_host_key: Path
    client_cert: Path
    client_key: Path
    client_key_password: str
    other_ca: Path
    untrusted_cert: Path
    untrusted_key: Path

    def server_context(self, *, which: str = "server", require_client_cert: bool = False,
                       maximum_version: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED,
                       ) -> ssl.SSLContext:
        """A server-side context for a front: ``which`` is server, wrong_host or untrusted.

        With TLS 1.3 a server refuses a client certificate only after the client's side of
        the handshake is done (the client then sees the connection close); with
        ``maximum_version=TLSVersion.TLSv1_2`` it refuses within the handshake.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.maximum_version = maximum_version
        cert, key = {"server": (self.server_cert, self.server_key),
                     "wrong_host": (self.wrong_host_cert, self.wrong_host_key),
                     "untrusted": (self.untrusted_cert, self.untrusted_key)}[which]
        context.load_cert_chain(cert, key)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.ca)
        return context


def make_certificates(directory: Path, hosts: Iterable[str] = ("127.0.0.1", "localhost"),
                      ) -> Certificates:
    """Make a CA and the certificates :class:`Certificates` lists in ``directory`` (EC P-256,
    valid for a day). Needs the ``cryptography`` package (the ``testing`` extra)."""
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415 - tests only

    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("eosclient test CA", ca_key, None, None, (), is_ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _certificate("some other CA", other_key, None, None, (), is_ca=True)

    def issue(name: str, names: Iterable[str], signer: Any, signer_key: Any,
              password: str | None = None) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(name, key, signer, signer_key, names, is_ca=False)
        return _write(directory, name, cert, key, password)

    password = "client-key-passphrase"
    ca_path = _write(directory, "ca", ca, None, None)[0]
    other_path = _write(directory, "other-ca", other, None, None)[0]
    server = issue("server", hosts, ca, ca_key)
    wrong = issue("wrong-host", ["wrong.example"], ca, ca_key)
    client = issue("client", ["client.example"], ca, ca_key, password)
    untrusted = issue("untrusted", hosts, other, other_key)
    return Certificates(ca_path, *server, *wrong, *client, password, other_path, *untrusted)


def _certificate(name: str, key: Any, issuer: Any, issuer_key: Any, names: Iterable[str], *,
                 is_ca: bool) -> Any:
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import hashes  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(subject)
               .issuer_name(issuer.subject if issuer is not None else subject)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True))
    alt: list[Any] = []
    for host in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt.append(x509.DNSName(host))
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    if is_ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
    builder = builder.add_extension(
        x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False)
    return builder.sign(issuer_key if issuer is not None else key, hashes.SHA256())


def _write(directory: Path, name: str, cert: Any, key: Any, password: str | None,
           ) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    cert_path = directory / f"{name}.crt"
    key_path = directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        encryption: Any = (serialization.BestAvailableEncryption(password.encode())
                           if password else serialization.NoEncryption())
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8, encryption))
        key_path.chmod(0o600)
    return cert_path, key_path

