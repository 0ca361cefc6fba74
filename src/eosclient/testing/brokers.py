"""Start and stop Kafka-speaking brokers (noida-db, Tansu) as local subprocesses.

Theory of operation
-------------------
Each broker is one child process in a session of its own (so its process group id is its pid),
listening on a 127.0.0.1 port, with stdout and stderr appended to one log file. The broker is
*ready* once it answers an ApiVersions request on that port; a child that exits first is a failed
start, reported with the tail of its log.

A free port is found by binding port 0 and closing the socket. Another process may take the port
before the broker binds it; the broker then exits saying so (noida-db with status 1, Tansu with a
panic and status 0), and a new port is tried. Only ports chosen here are replaced: a port the
caller named is kept, and a collision on it is an error.

Stopping sends SIGTERM to the broker's process group, waits, then sends SIGKILL. Brokers still
running when the interpreter exits are stopped by an ``atexit`` hook, and temporary directories
made here are removed then too. (An interpreter killed by SIGKILL runs no hook; nothing in-process
can help there.)

Example::

    with start_broker("noida") as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})

The binaries come with the ``broker`` extra (README: Install).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from eosclient._net.blocking import BlockingConnection
from eosclient._process import die_with_parent
from eosclient.errors import EosError
from eosclient.testing._broker_kinds import (
    LOOPBACK,
    BrokerError,
    BrokerKind,
    BrokerNotInstalledError,
    TansuStorage,
    broker_command,
    resolve_binary,
)
from eosclient.testing._s3_server import S3Server

__all__ = [
    "BROKER_KINDS",
    "LOOPBACK",
    "BrokerError",
    "BrokerKind",
    "BrokerNotInstalledError",
    "RunningBroker",
    "TansuStorage",
    "start_broker",
]

BROKER_KINDS: Final[tuple[BrokerKind, ...]] = ("noida", "tansu")

_PORT_ATTEMPTS: Final = 5
_POLL_INTERVAL: Final = 0.02
_PROBE_TIMEOUT: Final = 1.0
_KILL_WAIT: Final = 5.0
# What each broker logs when its port is taken: noida-db "port N is already in use";
# Tansu "AddrInUse" / "Address in use".
_PORT_IN_USE_MARKERS: Final = ("already in use", "AddrInUse", "Address in use")

_running: set[RunningBroker] = set()
_s3_servers: set[S3Server] = set()
_temp_dirs: set[Path] = set()


class _PortInUseError(Exception):
    """The broker exited because another process holds its port."""


class _EarlyExitError(Exception):
    """The broker process exited before it was ready."""


class RunningBroker:
    """A broker process started by :func:`start_broker`.

    Attributes are read-only. ``pid`` is the current (or, after :meth:`stop`, the last) process
    id; :meth:`restart` replaces it. Usable as a context manager: leaving the block stops the
    broker and removes the temporary directories :func:`start_broker` made for it.
    """

    def __init__(
        self,
        *,
        kind: BrokerKind,
        binary: Path,
        port: int,
        data_dir: Path | None,
        log_path: Path,
        advertised_host: str,
        advertised_port: int | None,
        temp_dir: Path | None,
        s3: S3Server | None = None,
    ) -> None:
        self._kind: BrokerKind = kind
        self._s3 = s3
        self._binary = binary
        self._port = port
        self._data_dir = data_dir
        self._log_path = log_path
        self._advertised_host = advertised_host
        self._advertised_port = advertised_port
        self._temp_dir = temp_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._last_pid = 0

    @property
    def kind(self) -> BrokerKind:
        """Which broker this is: ``"noida"`` or ``"tansu"``."""
        return self._kind

    @property
    def host(self) -> str:
        """The address the broker listens on (always loopback)."""
        return LOOPBACK

    @property
    def port(self) -> int:
        """The port the broker listens on; kept across :meth:`restart`."""
        return self._port

    @property
    def advertised_port(self) -> int:
        """The port the broker names in Metadata (its own unless a proxy port was given)."""
        return self._advertised_port if self._advertised_port is not None else self._port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port``, ready for a client's ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The process id (also the process group id) of the current or last broker process."""
        return self._last_pid

    @property
    def log_path(self) -> Path:
        """The file that receives the broker's stdout and stderr, across restarts."""
        return self._log_path

    @property
    def data_dir(self) -> Path | None:
        """noida-db's data directory; ``None`` for Tansu (memory or s3: no files here)."""
        return self._data_dir

    @property
    def storage(self) -> TansuStorage | None:
        """Tansu's storage engine (``"memory"`` or ``"s3"``); ``None`` for noida-db."""
        if self._kind == "noida":
            return None
        return "s3" if self._s3 is not None else "memory"

    @property
    def keeps_data(self) -> bool:
        """Whether a :meth:`restart` keeps topics, offsets and transactions (noida-db's data
        directory, Tansu's s3 engine), or starts empty (Tansu's memory engine)."""
        return self.storage != "memory"

    @property
    def running(self) -> bool:
        """Whether the broker process is alive (it may have crashed or been stopped)."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the broker: SIGTERM to its process group, then SIGKILL after ``timeout`` seconds.

        Idempotent. Files are kept, so :meth:`log_tail` and :meth:`restart` still work.
        """
        self._terminate(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Kill the broker at once with SIGKILL, as a crash would. Idempotent."""
        self._terminate(signal.SIGKILL, _KILL_WAIT)

    def restart(self, *, timeout: float = 30.0, stop_timeout: float = 10.0) -> None:
        """Stop the broker if it runs, then start it again on the same port and data directory.

        noida-db keeps its data (and aborts transactions that were open); Tansu keeps it with
        the s3 engine (its S3 server keeps running), and starts empty with the memory engine.

        Raises:
            BrokerError: the broker did not come back within ``timeout``; it is left stopped.
        """
        self.stop(stop_timeout)
        try:
            self._launch(timeout)
        except _PortInUseError as exc:
            raise BrokerError(f"{self!r}: port {self._port} was taken while stopped") from exc

    def log_tail(self, n: int = 50) -> str:
        """Return the last ``n`` lines of the broker's log ("" if there is no log yet)."""
        try:
            with self._log_path.open(encoding="utf-8", errors="replace") as log:
                return "".join(deque(log, maxlen=n))
        except FileNotFoundError:
            return ""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        self._stop_s3()
        self._remove_temp_dir()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RunningBroker {self._kind} {self.bootstrap_servers} pid={self._last_pid} {state}>"

    def _command(self) -> list[str]:
        return broker_command(
            self._kind,
            self._binary,
            self._port,
            data_dir=self._data_dir,
            advertised_host=self._advertised_host,
            advertised_port=self.advertised_port,
            storage=self.storage or "memory",
        )

    def _env(self) -> dict[str, str]:
        return self._s3.tansu_env() if self._s3 is not None else {}

    def _start(self, timeout: float, *, new_port_if_taken: bool) -> None:
        """Start the first process, on a new free port if another process took the chosen one."""
        attempts = _PORT_ATTEMPTS if new_port_if_taken else 1
        for attempt in range(1, attempts + 1):
            try:
                self._launch(timeout)
                return
            except _PortInUseError as exc:
                if attempt == attempts:
                    raise BrokerError(
                        f"{self._kind}: port {self._port} is in use (attempt {attempt} of"
                        f" {attempts})\n--- log tail ({self._log_path}) ---\n{self.log_tail()}"
                    ) from exc
                self._port = _free_port()

    def _launch(self, timeout: float) -> None:
        """Start one process and wait until it is ready; on any failure it is stopped again.

        Raises:
            _PortInUseError: the process exited because its port is taken.
            BrokerError: it exited for another reason, or did not answer within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        log_offset = self._log_path.stat().st_size
        self._proc = _spawn(self._command(), self._log_path, self._env())
        self._last_pid = self._proc.pid
        _running.add(self)
        try:
            _wait_until_ready(self._proc, self._port, deadline)
        except BaseException as exc:
            self.kill()
            if isinstance(exc, _EarlyExitError | TimeoutError):
                raise self._start_error(exc, log_offset) from exc
            raise

    def _start_error(self, exc: Exception, log_offset: int) -> Exception:
        """Classify a failed start by what this attempt wrote to the log."""
        output = _read_from(self._log_path, log_offset)
        if isinstance(exc, _EarlyExitError) and any(m in output for m in _PORT_IN_USE_MARKERS):
            return _PortInUseError(f"port {self._port} is in use")
        what = "did not answer ApiVersions in time" if isinstance(exc, TimeoutError) else str(exc)
        return BrokerError(
            f"{self._kind} on {self.bootstrap_servers}: {what}"
            f"\n--- log tail ({self._log_path}) ---\n{self.log_tail()}"
        )

    def _terminate(self, sig: signal.Signals, timeout: float) -> None:
        proc, self._proc = self._proc, None
        _running.discard(self)
        if proc is None:
            return
        if proc.poll() is None:
            _signal_group(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(_KILL_WAIT)

    def _stop_s3(self) -> None:
        if self._s3 is not None:
            self._s3.stop()
            _s3_servers.discard(self._s3)

    def _remove_temp_dir(self) -> None:
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            _temp_dirs.discard(self._temp_dir)


def start_broker(
    kind: BrokerKind,
    *,
    port: int | None = None,
    data_dir: Path | None = None,
    log_dir: Path | None = None,
    advertised_host: str = LOOPBACK,
    advertised_port: int | None = None,
    storage: TansuStorage = "memory",
    timeout: float = 30.0,
) -> RunningBroker:
    """Start a broker on 127.0.0.1 and return once it answers ApiVersions.

    Args:
        kind: ``"noida"`` (noida-db, data on disk) or ``"tansu"`` (Tansu, see ``storage``).
        port: The port to listen on; by default a free one (retried if another process takes it
            first).
        data_dir: noida-db's data directory (created if missing); by default a temporary one.
            Not accepted for Tansu.
        log_dir: Where the log file goes (created if missing); by default a temporary directory.
        advertised_host: Tansu only: the host named in Metadata responses.
        advertised_port: Tansu only: the port named in Metadata responses, e.g. a proxy's;
            by default the broker's own port.
        storage: Tansu only: ``"memory"`` (starts empty after :meth:`RunningBroker.restart`)
            or ``"s3"``: a local S3 server (moto's, ``pip install "moto[server]"``) started with
            the broker and stopped with it, so a restart keeps the data.
        timeout: Seconds to wait for the broker to be ready.

    Returns:
        The running broker. Directories made here are removed on leaving its ``with`` block or
        at interpreter exit; pass ``data_dir``/``log_dir`` to keep them.

    Raises:
        ValueError: an option that this kind of broker does not take.
        BrokerNotInstalledError: the package shipping the binary is not installed.
        BrokerError: the broker exited or did not answer in time; nothing is left running.
    """
    _check_options(kind, data_dir, advertised_host, advertised_port, storage)
    binary = resolve_binary(kind)
    data_dir, log_dir, temp_dir = _directories(kind, data_dir, log_dir)
    log_path = _new_log_path(log_dir, kind)
    s3 = None
    if storage == "s3":
        s3 = S3Server(log_path.with_suffix(".s3.log"))
        s3.start(timeout)
        _s3_servers.add(s3)
    broker = RunningBroker(
        kind=kind,
        binary=binary,
        port=port if port is not None else _free_port(),
        data_dir=data_dir,
        log_path=log_path,
        advertised_host=advertised_host,
        advertised_port=advertised_port,
        temp_dir=temp_dir,
        s3=s3,
    )
    try:
        broker._start(timeout, new_port_if_taken=port is None)
    except BaseException:
        broker._stop_s3()
        raise
    return broker


def _check_options(
    kind: BrokerKind,
    data_dir: Path | None,
    advertised_host: str,
    advertised_port: int | None,
    storage: TansuStorage,
) -> None:
    if kind not in BROKER_KINDS:
        raise ValueError(f"unknown broker kind {kind!r}; expected one of {BROKER_KINDS}")
    if kind == "tansu" and data_dir is not None:
        raise ValueError("Tansu takes no data_dir (storage='s3' keeps its data across restarts)")
    if storage not in ("memory", "s3"):
        raise ValueError(f"unknown Tansu storage {storage!r}; expected 'memory' or 's3'")
    if kind == "noida" and storage != "memory":
        raise ValueError("noida-db keeps its data in data_dir; storage is Tansu's option")
    if kind == "noida" and (advertised_port is not None or advertised_host != LOOPBACK):
        raise ValueError(
            "noida-db cannot advertise another address; put a rewriting proxy in front"
        )


def _directories(
    kind: BrokerKind, data_dir: Path | None, log_dir: Path | None
) -> tuple[Path | None, Path, Path | None]:
    """Return ``(data_dir, log_dir, temp_dir)``, with a temporary directory for what is missing."""
    temp_dir = None
    if log_dir is None or (kind == "noida" and data_dir is None):
        temp_dir = _make_temp_dir(kind)
        log_dir = log_dir or temp_dir
        if kind == "noida" and data_dir is None:
            data_dir = temp_dir / "data"
    assert log_dir is not None  # for mypy: set above when it was missing
    for directory in (data_dir, log_dir):
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
    return data_dir, log_dir, temp_dir


def _make_temp_dir(kind: BrokerKind) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"eosclient-{kind}-"))
    _temp_dirs.add(path)
    return path


def _new_log_path(log_dir: Path, kind: BrokerKind) -> Path:
    for n in range(1, 1000):
        path = log_dir / (f"{kind}.log" if n == 1 else f"{kind}-{n}.log")
        try:
            path.open("x").close()
        except FileExistsError:
            continue
        return path
    raise BrokerError(f"no free log file name for {kind} in {log_dir}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _spawn(command: list[str], log_path: Path,
           extra_env: dict[str, str]) -> subprocess.Popen[bytes]:
    # NO_COLOR: plain text in the log, not ANSI colour codes.
    env = {**os.environ, "NO_COLOR": "1", **extra_env}
    with log_path.open("ab") as log:
        log.write(f"--- eosclient: {shlex.join(command)}\n".encode())
        log.flush()
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            # Safe with threads here: the hook only calls a C function resolved before the fork.
            preexec_fn=die_with_parent,  # noqa: PLW1509
        )


def _wait_until_ready(proc: subprocess.Popen[bytes], port: int, deadline: float) -> None:
    """Return once the broker answers ApiVersions.

    Raises:
        _EarlyExitError: the process exited first.
        TimeoutError: the deadline passed.
    """
    # Short probe timeouts at first, so that a port held by a silent listener costs little before
    # the broker's exit is noticed; longer ones later, for a slow machine.
    probe_timeout = _POLL_INTERVAL
    while True:
        if proc.poll() is not None:
            raise _EarlyExitError(f"exit status {proc.returncode}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        probe_timeout = min(probe_timeout * 2, _PROBE_TIMEOUT, remaining)
        try:
            BlockingConnection(LOOPBACK, port, timeout=probe_timeout).close()
        except EosError:
            time.sleep(_POLL_INTERVAL)
            continue
        # Something answered; make sure it was our broker and not another one on a taken port.
        if proc.poll() is None:
            return


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as log:
        log.seek(offset)
        return log.read().decode("utf-8", errors="replace")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


@atexit.register
def _stop_everything() -> None:
    for broker in list(_running):
        broker.stop(timeout=5.0)
    for server in list(_s3_servers):
        server.stop()
    _s3_servers.clear()
    for path in list(_temp_dirs):
        shutil.rmtree(path, ignore_errors=True)
    _temp_dirs.clear()
