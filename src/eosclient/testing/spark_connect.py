"""A Spark Connect server on loopback, for tests: the pyspark wheel's server in a child process.

Theory of operation
-------------------
The pyspark wheel ships the Connect server (``org.apache.spark.sql.connect.service.
SparkConnectServer``, in ``jars/spark-connect_*.jar``). ``sbin/start-connect-server.sh`` runs it
through ``spark-daemon.sh``, which daemonizes it (a pid file, a log of its own choosing, a
parent that returns at once); here ``bin/spark-submit --class ...SparkConnectServer
spark-internal`` runs it in the foreground instead, as one child process in a session of its own
(its process group id is its pid), like :mod:`eosclient.testing.spark_cluster`'s master and
workers. The server is itself a Spark driver: with ``cluster=`` its application runs on that
standalone cluster's executors (``spark.master`` and the loopback settings of
:meth:`SparkCluster.driver_config`), otherwise in ``local[2]``.

It binds 127.0.0.1 only (``spark.connect.grpc.binding.address``) and a port the gRPC server
picks itself (``spark.connect.grpc.binding.port=0``), which leaves no window in which another
process can take a port chosen here; the server logs where it listens (``Spark Connect server
started at: 127.0.0.1:PORT``), and that line is its readiness: it is written once the gRPC
service accepts connections, after the SparkContext (and on a cluster, the application's
registration with the master) started. Every wait is bounded, and a failure (the server exited,
the deadline passed) is a :class:`SparkConnectError` whose message ends with the tail of its log.

How the server's Python imports eosclient: the server is the driver of everything a client
sends, and it starts Python processes of two kinds, its own (``foreachBatch`` functions, data
source planning) and, through the executors, the tasks' Python workers. Both run
``PYSPARK_PYTHON``, set here to this interpreter (an environment with eosclient installed, as a
user's server and executors have it installed at the same path on every host), in the server's
environment and as ``spark.pyspark.python`` (which ``spark-submit`` honours).

:meth:`SparkConnectServer.stop` sends SIGTERM to the server's group and to every process found
below it (its Python processes lead groups of their own), SIGKILL to what is left after a
timeout, and waits until none is left. The server dies with the process that started it
(``PR_SET_PDEATHSIG``) and is stopped at interpreter exit. A cluster's executors belong to its
workers: the master stops them once the server's application has ended.

Example::

    with start_spark_cluster() as cluster, start_connect_server(cluster=cluster) as server:
        spark = SparkSession.builder.remote(server.url).getOrCreate()
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from eosclient._process import die_with_parent
from eosclient.testing.brokers import LOOPBACK
from eosclient.testing.spark_cluster import (
    SparkCluster,
    SparkClusterError,
    spark_home,
    stop_groups,
)

__all__ = ["CONNECT_SERVER_CLASS", "SERVER_NAME", "SparkConnectError", "SparkConnectServer",
           "start_connect_server"]

CONNECT_SERVER_CLASS: Final = "org.apache.spark.sql.connect.service.SparkConnectServer"
SERVER_NAME: Final = "eosclient-connect-server"  # its application's name on the master
_STARTED: Final = re.compile(r"Spark Connect server started at: (\S+):(\d+)")
_POLL_INTERVAL: Final = 0.1
_KILL_WAIT: Final = 10.0
_TAIL_LINES: Final = 40

_running: set[SparkConnectServer] = set()


class SparkConnectError(SparkClusterError):
    """The Connect server could not be started, or did not stop; the message ends with the
    tail of its log."""


class SparkConnectServer:
    """A Spark Connect server process, started by :func:`start_connect_server`.

    Usable as a context manager: leaving the block stops it (:meth:`stop`).

    Attributes:
        url: Where clients connect (``sc://127.0.0.1:PORT``), set once it is ready.
    """

    def __init__(self, *, log_dir: Path, temp_dir: Path | None) -> None:
        self._log_dir = log_dir
        self._temp_dir = temp_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self.url = ""

    @property
    def log_path(self) -> Path:
        """The server's log (its stdout and stderr; appended to when ``log_dir`` is kept)."""
        return self._log_dir / "connect-server.log"

    @property
    def pid(self) -> int:
        """The server's process id (also its process group id); 0 before it started."""
        return self._proc.pid if self._proc else 0

    @property
    def running(self) -> bool:
        """Whether the server's process has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last ``lines`` of this server's log."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "".join(deque(text.splitlines(keepends=True), maxlen=lines))

    def stop(self, timeout: float = _KILL_WAIT) -> None:
        """Stop the server and every process below it, and wait until none is left.
        Idempotent.

        Raises:
            SparkConnectError: a process survived SIGKILL (it is named).
        """
        _running.discard(self)
        proc = self._proc
        if proc is not None and (left := stop_groups([proc], timeout)):
            raise SparkConnectError(f"processes left after SIGKILL: {left}")
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<SparkConnectServer {self.url or '(starting)'} pid={self.pid}>"

    def _start(self, command: list[str], env: Mapping[str, str], deadline: float) -> None:
        with self.log_path.open("ab") as log:
            self._log_offset = log.tell()
            log.write(f"--- eosclient: {shlex.join(command)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=dict(env), cwd=self._log_dir, start_new_session=True,
                # Safe with threads here: the hook only calls a C function resolved before the
                # fork. spark-submit execs the JVM, so the JVM keeps the setting.
                preexec_fn=die_with_parent)  # noqa: PLW1509
        _running.add(self)
        while True:
            found = _STARTED.search(self._log_text())
            if found:
                self.url = f"sc://{found.group(1)}:{found.group(2)}"
                return
            if not self.running:
                raise self._error(f"exited with status {self._proc.poll()}")
            if time.monotonic() >= deadline:
                raise self._error("did not log that it listens in time")
            time.sleep(_POLL_INTERVAL)

    def _log_text(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self._log_offset)
            return log.read().decode("utf-8", errors="replace")

    def _error(self, what: str) -> SparkConnectError:
        return SparkConnectError(f"spark connect server: {what}\n"
                                 f"--- {self.log_path.name} ---\n{self.log_tail()}")


def start_connect_server(*, cluster: SparkCluster | None = None,
                         conf: Mapping[str, str] | None = None, log_dir: Path | None = None,
                         timeout: float = 120.0) -> SparkConnectServer:
    """Start a Spark Connect server on 127.0.0.1 and a free port; return once it listens.

    Args:
        cluster: The standalone cluster whose executors run the server's application; None
            for ``local[2]`` (tasks in the server's JVM).
        conf: More Spark settings for the server (``--conf``), applied last.
        log_dir: Where its log (``connect-server.log``) and working directory go (created if
            missing; kept); by default a temporary directory, removed by
            :meth:`SparkConnectServer.stop`.
        timeout: Seconds until it must listen (a JVM, a SparkContext, on a cluster the
            application's registration; slow on a loaded machine).

    Raises:
        SparkConnectError: it exited or did not listen within ``timeout``; nothing is left
            running.
    """
    deadline = time.monotonic() + timeout
    temp_dir = None
    if log_dir is None:
        log_dir = temp_dir = Path(tempfile.mkdtemp(prefix="eosclient-connect-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "spark.master": "local[2]",
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        **(cluster.driver_config() if cluster is not None else {}),
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": "0",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        **(conf or {}),
    }
    command = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS,
               "--name", SERVER_NAME]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    command.append("spark-internal")  # spark-submit's name for "no application jar"
    env = {**os.environ, "SPARK_LOCAL_IP": LOOPBACK, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("SPARK_REMOTE", None)  # the server is a classic driver, whatever this process is
    server = SparkConnectServer(log_dir=log_dir, temp_dir=temp_dir)
    try:
        server._start(command, env, deadline)
    except BaseException:
        with contextlib.suppress(SparkConnectError):
            server.stop()
        raise
    return server


@atexit.register
def _stop_everything() -> None:
    for server in list(_running):
        with contextlib.suppress(SparkConnectError):
            server.stop(timeout=5.0)
