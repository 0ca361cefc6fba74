"""A Spark standalone cluster on loopback, for tests: a master and workers from the pyspark wheel.

Theory of operation
-------------------
The pyspark wheel ships ``bin/spark-class``, which runs Spark's standalone ``Master`` and
``Worker`` (Java 17, which Spark needs anyway). Each daemon is one child process in a session of
its own (its process group id is its pid), told to bind 127.0.0.1 only (``SPARK_LOCAL_IP`` and
``--host``: without them a worker registers on the machine's interface address) and to take
free ports itself (``--port 0 --webui-port 0``), which leaves no window in which another
process can take a port chosen here. The ports are read back from the daemons' logs; the
master's REST submission server (fixed port 6066) is switched off, so clusters of parallel test
runs never collide.

The cluster is *ready* when the master's web UI (``/json/``) lists every worker ALIVE. Every
wait is bounded, and a failure (a daemon that exited, a deadline passed) is a
:class:`SparkClusterError` whose message ends with the tails of every log: the master's, the
workers', and the executors' (a worker keeps each executor's stderr in its work directory,
which lives under ``log_dir``).

A worker starts the applications' executors (JVMs whose command line names
``CoarseGrainedExecutorBackend``) as its children, in its process group; each executor starts a
Python daemon (``pyspark.daemon``, a process group of its own) that forks the Python workers.
:meth:`SparkCluster.executors` lists the executor JVMs, :meth:`SparkCluster.executor_of` finds
the one above a Python worker's pid, and :meth:`SparkCluster.kill_executor` and
:meth:`SparkCluster.kill_worker` are the faults a cluster has. :meth:`SparkCluster.stop` signals
every daemon's group and every process found below them (the Python daemons included), then
waits until none is left. Daemons die with the process that started them (``PR_SET_PDEATHSIG``)
and are stopped at interpreter exit.

How executors import eosclient: the driver names the executors' Python with ``PYSPARK_PYTHON``
(:meth:`SparkCluster.driver_env`); here it is the driver's own interpreter, an environment with
eosclient installed, as a user's cluster has it installed at the same path on every host.
Executors inherit the workers' environment, which is this process's.

Example::

    with start_spark_cluster(log_dir=tmp / "spark") as cluster:
        os.environ.update(cluster.driver_env())
        spark = SparkSession.builder.config(map=cluster.driver_config()).getOrCreate()
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from eosclient._extras import install_extra
from eosclient._process import die_with_parent
from eosclient.testing.brokers import LOOPBACK

__all__ = ["Executor", "SparkCluster", "SparkClusterError", "spark_home", "start_spark_cluster",
           "stop_groups"]

EXECUTOR_CLASS: Final = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
_MASTER_CLASS: Final = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS: Final = "org.apache.spark.deploy.worker.Worker"
_MASTER_URL: Final = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI: Final = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")
_WORKER_PORT: Final = re.compile(r"Starting Spark worker [\d.]+:(\d+)")
_POLL_INTERVAL: Final = 0.1
_KILL_WAIT: Final = 10.0
_TAIL_LINES: Final = 30
# Daemons' settings: no REST submission server (its port is fixed at 6066), and a worker
# that cleans no application directory while the test may still read its logs.
_DAEMON_PROPERTIES: Final = ("spark.master.rest.enabled false\n"
                             "spark.worker.cleanup.enabled false\n"
                             "spark.ui.showConsoleProgress false\n")

_running: set[SparkCluster] = set()


class SparkClusterError(RuntimeError):
    """The cluster could not be started, or did not reach a state in time; the message ends
    with the tails of its logs."""


@dataclass(frozen=True, slots=True)
class Executor:
    """One executor JVM of an application, as the process table shows it.

    Attributes:
        pid: The JVM's process id.
        executor_id: Spark's executor id (``"0"``, ``"1"``, ...; a replacement gets a new one).
        app_id: The application it belongs to.
        worker: The index of the worker that started it.
    """

    pid: int
    executor_id: str
    app_id: str
    worker: int


@dataclass(slots=True)
class _Daemon:
    """A master or worker process, with the log that receives its stdout and stderr."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_offset: int  # where this process's output begins (a kept log_dir is appended to)

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode("utf-8", errors="replace")


class SparkCluster:
    """A standalone master and its workers, started by :func:`start_spark_cluster`.

    Usable as a context manager: leaving the block stops every process (:meth:`stop`).
    """

    def __init__(self, *, log_dir: Path, temp_dir: Path | None, cores: int,
                 memory_mb: int) -> None:
        self._log_dir = log_dir
        self._temp_dir = temp_dir
        self._cores = cores
        self._memory_mb = memory_mb
        self._master: _Daemon | None = None
        self._workers: list[_Daemon] = []
        self._worker_ports: list[int] = []
        self._lost: set[int] = set()  # workers killed on purpose (kill_worker)
        self.master_url = ""
        self.web_url = ""

    # -- what tests read ------------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        """The directory of the daemons' logs and the workers' work directories (executor
        logs: ``worker-<n>/<app id>/<executor id>/stderr``)."""
        return self._log_dir

    @property
    def worker_pids(self) -> list[int]:
        """Each worker's process id (also its process group id), in start order; a lost
        worker keeps its place."""
        return [w.proc.pid for w in self._workers]

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """The master's view of the cluster (its web UI's ``/json/``: workers, applications).

        Raises:
            SparkClusterError: the master did not answer within ``timeout``.
        """
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=timeout) as answer:
                view: dict[str, Any] = json.load(answer)
                return view
        except (OSError, ValueError) as exc:
            raise self._error(f"the master's web UI did not answer: {exc}") from exc

    def alive_workers(self) -> int:
        """How many of this cluster's workers the master lists ALIVE."""
        ports = set(self._worker_ports)
        return sum(1 for w in self.status().get("workers", [])
                   if w.get("state") == "ALIVE" and w.get("port") in ports)

    def executors(self) -> list[Executor]:
        """The executor JVMs running now, of every application, in pid order."""
        groups = {pid: index for index, pid in enumerate(self.worker_pids)}
        found = []
        for pid in _pids():
            args = _cmdline(pid)
            if EXECUTOR_CLASS not in args:
                continue
            try:
                group = os.getpgid(pid)
            except ProcessLookupError:
                continue
            if group in groups:
                found.append(Executor(pid, _arg(args, "--executor-id"), _arg(args, "--app-id"),
                                      groups[group]))
        return found

    def executor_of(self, pid: int) -> Executor | None:
        """The executor JVM above process ``pid`` (a Python worker, or the JVM itself), or None
        if there is none (the process is gone, or is not below this cluster's executors)."""
        executors = {e.pid: e for e in self.executors()}
        while pid > 1:
            if pid in executors:
                return executors[pid]
            pid = _parent(pid)
        return None

    def log_tails(self, lines: int = _TAIL_LINES) -> str:
        """The last ``lines`` of the master's log, each worker's, and each executor's of the
        latest application (earlier ones stay in :attr:`log_dir`)."""
        paths = [d.log_path for d in self._daemons()]
        # Application ids sort by their start time (app-<yyyymmddhhmmss>-<n>).
        apps = sorted({p.name for p in self._log_dir.glob("worker-*/app-*")})
        if apps:
            paths += sorted(self._log_dir.glob(f"worker-*/{apps[-1]}/*/stderr"))
        parts = []
        for path in paths:
            try:
                with path.open(encoding="utf-8", errors="replace") as log:
                    tail = "".join(deque(log, maxlen=lines))
            except FileNotFoundError:
                continue
            parts.append(f"--- {path.relative_to(self._log_dir)} ---\n{tail}")
        return "\n".join(parts)

    # -- faults ---------------------------------------------------------------------------------

    def kill_executor(self, executor: Executor) -> None:
        """SIGKILL one executor JVM, as an out-of-memory killer or a crash would. Its Python
        daemon and workers see their input end and exit; its worker reports the loss to the
        master, which starts a replacement while the application wants one."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(executor.pid, signal.SIGKILL)

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` and its executors at once (its process group), as a lost
        host would: the master and the driver see its connections close."""
        worker = self._workers[index]
        self._lost.add(index)
        _signal_group(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait(_KILL_WAIT)

    def add_worker(self, timeout: float = 60.0) -> int:
        """Start one more worker (say, in place of a lost one) and wait until the master lists
        it ALIVE; return its index.

        Raises:
            SparkClusterError: it exited or was not registered within ``timeout``; it is
                killed again (and counted lost).
        """
        deadline = time.monotonic() + timeout
        index = self._spawn_worker()
        try:
            self._worker_ports.append(self._wait_for_worker_port(self._workers[index], deadline))
            self._wait_registered(lambda ours: self._worker_ports[index] in ours,
                                  "the new worker", deadline)
        except BaseException:
            self.kill_worker(index)
            raise
        return index

    def wait_for_workers(self, count: int, timeout: float) -> None:
        """Return once the master lists ``count`` of this cluster's workers ALIVE.

        Raises:
            SparkClusterError: not so within ``timeout``, or the master or a worker not killed
                by :meth:`kill_worker` exited.
        """
        self._wait_registered(lambda ours: len(ours) >= count, f"{count} workers",
                              time.monotonic() + timeout)

    def _wait_registered(self, done: Callable[[set[int]], bool], what: str,
                         deadline: float) -> None:
        """Poll the master until ``done`` holds for the ports of this cluster's ALIVE workers."""
        while True:
            watched = [w for i, w in enumerate(self._workers) if i not in self._lost]
            for daemon in [*([self._master] if self._master else []), *watched]:
                if not daemon.running:
                    raise self._error(f"{daemon.name} exited with status {daemon.proc.poll()}")
            view = self.status(max(deadline - time.monotonic(), 0.5))
            ours = {w.get("port") for w in view.get("workers", [])
                    if w.get("state") == "ALIVE"} & set(self._worker_ports)
            if done(ours):
                return
            if time.monotonic() >= deadline:
                raise self._error(f"{what} not registered in time ({len(ours)} alive)")
            time.sleep(_POLL_INTERVAL)

    # -- what drivers need ----------------------------------------------------------------------

    def driver_config(self) -> dict[str, str]:
        """The settings a driver needs for this cluster: every socket on loopback, executors
        that fit the workers (one core each)."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.executor.cores": "1",
            "spark.executor.memory": f"{max(self._memory_mb - 256, 256)}m",
        }

    @staticmethod
    def driver_env() -> dict[str, str]:
        """The environment a driver needs before its SparkContext starts: this interpreter as
        the executors' Python (PySpark's driver reads ``PYSPARK_PYTHON`` from its environment,
        not from ``spark.pyspark.python``, unless started by ``spark-submit``; without it the
        executors run the first ``python3`` on their PATH, where eosclient may be missing), and
        loopback for its own sockets."""
        return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "SPARK_LOCAL_IP": LOOPBACK}

    # -- start and stop -------------------------------------------------------------------------

    def stop(self, timeout: float = _KILL_WAIT) -> None:
        """Stop every process of the cluster and wait until none is left. Idempotent.

        Workers (with their executors) first, then the master: SIGTERM to each group and to the
        Python daemons found below them (they lead groups of their own), SIGKILL to whatever is
        left after ``timeout`` seconds.

        Raises:
            SparkClusterError: a process survived SIGKILL (it is named).
        """
        _running.discard(self)
        daemons = [*self._workers, *([self._master] if self._master else [])]
        left = stop_groups([d.proc for d in daemons], timeout)
        if left:
            raise SparkClusterError(f"processes left after SIGKILL: {left}")
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<SparkCluster {self.master_url or '(starting)'} workers={len(self._workers)}>"

    def _start(self, workers: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        properties = self._log_dir / "spark-daemons.conf"
        properties.write_text(_DAEMON_PROPERTIES)
        self._master = self._spawn("master", _MASTER_CLASS, "--port", "0", "--webui-port", "0",
                                   "--properties-file", str(properties))
        url = self._wait_for_log(self._master, _MASTER_URL, deadline)
        ui_port = self._wait_for_log(self._master, _MASTER_UI, deadline)
        self.master_url, self.web_url = url, f"http://{LOOPBACK}:{ui_port}"
        for _ in range(workers):
            self._spawn_worker()
        for worker in self._workers:
            self._worker_ports.append(self._wait_for_worker_port(worker, deadline))
        self.wait_for_workers(workers, max(deadline - time.monotonic(), 0.0))

    def _spawn_worker(self) -> int:
        index = len(self._workers)
        work_dir = self._log_dir / f"worker-{index}"
        work_dir.mkdir(exist_ok=True)
        self._workers.append(self._spawn(
            f"worker-{index}", _WORKER_CLASS, "--port", "0", "--webui-port", "0",
            "--cores", str(self._cores), "--memory", f"{self._memory_mb}m",
            "--work-dir", str(work_dir),
            "--properties-file", str(self._log_dir / "spark-daemons.conf"), self.master_url))
        return index

    def _spawn(self, name: str, main_class: str, *args: str) -> _Daemon:
        command = [str(spark_home() / "bin" / "spark-class"), main_class, "--host", LOOPBACK,
                   *args]
        log_path = self._log_dir / f"{name}.log"
        env = {**os.environ, "SPARK_LOCAL_IP": LOOPBACK, "PYSPARK_PYTHON": sys.executable}
        with log_path.open("ab") as log:
            offset = log.tell()
            log.write(f"--- eosclient: {shlex.join(command)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
                # Safe with threads here: the hook only calls a C function resolved before the
                # fork. spark-class execs the JVM, so the JVM keeps the setting.
                preexec_fn=die_with_parent)  # noqa: PLW1509
        daemon = _Daemon(name, proc, log_path, offset)
        if name == "master":
            self._master = daemon
        _running.add(self)
        return daemon

    def _wait_for_worker_port(self, worker: _Daemon, deadline: float) -> int:
        return int(self._wait_for_log(worker, _WORKER_PORT, deadline))

    def _wait_for_log(self, daemon: _Daemon, pattern: re.Pattern[str], deadline: float) -> str:
        """The first group of ``pattern``'s first match in the daemon's log, once it appears.

        Raises:
            SparkClusterError: the daemon exited first, or the deadline passed.
        """
        while True:
            found = pattern.search(daemon.log_text())
            if found:
                return found.group(1)
            if not daemon.running:
                raise self._error(f"{daemon.name} exited with status {daemon.proc.poll()}")
            if time.monotonic() >= deadline:
                raise self._error(f"{daemon.name} did not log {pattern.pattern!r} in time")
            time.sleep(_POLL_INTERVAL)

    def _daemons(self) -> list[_Daemon]:
        return [*([self._master] if self._master else []), *self._workers]

    def _error(self, what: str) -> SparkClusterError:
        return SparkClusterError(f"spark cluster {self.master_url or '(starting)'}: {what}\n"
                                 f"{self.log_tails()}")


def start_spark_cluster(*, workers: int = 2, cores: int = 1, memory_mb: int = 1024,
                        log_dir: Path | None = None, timeout: float = 90.0) -> SparkCluster:
    """Start a standalone master and ``workers`` workers on 127.0.0.1; return once the master
    lists every worker ALIVE.

    Args:
        workers: How many workers (each one executor of an application at a time, with
            ``cores=1`` and the driver's ``spark.executor.cores=1``).
        cores: Cores each worker offers.
        memory_mb: Memory each worker offers; :meth:`SparkCluster.driver_config` asks for
            executors 256 MiB smaller.
        log_dir: Where the logs and the workers' work directories go (created if missing; kept);
            by default a temporary directory, removed by :meth:`SparkCluster.stop`.
        timeout: Seconds for the whole start.

    Raises:
        SparkClusterError: a daemon exited or the cluster was not ready within ``timeout``;
            nothing is left running.
    """
    temp_dir = None
    if log_dir is None:
        log_dir = temp_dir = Path(tempfile.mkdtemp(prefix="eosclient-spark-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    cluster = SparkCluster(log_dir=log_dir, temp_dir=temp_dir, cores=cores, memory_mb=memory_mb)
    try:
        cluster._start(workers, timeout)
    except BaseException:
        with contextlib.suppress(SparkClusterError):
            cluster.stop()
        raise
    return cluster


def spark_home() -> Path:
    """The pyspark wheel's directory: its ``bin/spark-class`` starts the daemons.

    Raises:
        SparkClusterError: pyspark is not installed (the ``spark`` extra).
    """
    try:
        import pyspark  # noqa: PLC0415 - the spark extra, needed only here
    except ImportError as exc:
        raise SparkClusterError(f"pyspark is not installed: {install_extra('spark')}",
                                ) from exc
    return Path(pyspark.__file__).parent


# -- the process table ----------------------------------------------------------------------------


def _pids() -> list[int]:
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")


def _parent(pid: int) -> int:
    """The parent's pid (0 if the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    # The command name (field 2) may hold spaces and parentheses: the fields after it are
    # counted from its last ')'.
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _descendants(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid in _pids():
        children.setdefault(_parent(pid), []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _arg(args: list[str], name: str) -> str:
    return args[args.index(name) + 1] if name in args[:-1] else ""


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a dead child not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def stop_groups(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> list[int]:
    """Stop child processes that lead process groups of their own, and everything below them:
    SIGTERM to each group and to the processes found below (Spark's Python daemons lead groups
    of their own), SIGKILL to whatever is left after ``timeout`` seconds. Returns the pids
    still alive after that (empty: all gone)."""
    below = _descendants({proc.pid for proc in procs})
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            _signal_group(proc.pid, sig)
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if _wait_gone(procs, below, timeout):
            return []
    return [p for p in below if _alive(p)] + [p.pid for p in procs if p.poll() is None]


def _wait_gone(procs: Sequence[subprocess.Popen[bytes]], pids: set[int],
               timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        # poll() reaps each once it exited
        if all(proc.poll() is not None for proc in procs) and not any(_alive(p) for p in pids):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@atexit.register
def _stop_everything() -> None:
    for cluster in list(_running):
        with contextlib.suppress(SparkClusterError):
            cluster.stop(timeout=5.0)
