"""A local S3 server (moto's) for Tansu's ``s3://`` storage engine, the one that survives a
restart of the broker (its memory engine starts empty).

The server is a child process in a session of its own, on a free 127.0.0.1 port, with its output
appended to a log file; it is ready once it answers HTTP, and then gets one bucket. Tansu finds it
through the environment :meth:`S3Server.tansu_env` gives (the ``object_store`` crate's
``AWS_*`` variables; the credentials are moto's dummies). It needs ``moto[server]``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

from eosclient._process import die_with_parent
from eosclient.testing._broker_kinds import LOOPBACK, BrokerError, BrokerNotInstalledError

__all__ = ["BUCKET", "S3Server"]

BUCKET: Final = "tansu"
_POLL_INTERVAL: Final = 0.05
_KILL_WAIT: Final = 5.0


class S3Server:
    """moto's S3 server, started and given :data:`BUCKET` by :meth:`start`."""

    def __init__(self, log_path: Path) -> None:
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The endpoint, ``http://127.0.0.1:PORT``."""
        return f"http://{LOOPBACK}:{self.port}"

    def tansu_env(self) -> dict[str, str]:
        """The environment that points Tansu's ``s3://`` engine at this server."""
        return {"AWS_ENDPOINT": self.url, "AWS_ALLOW_HTTP": "true",
                "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_DEFAULT_REGION": "us-east-1"}

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and create the bucket.

        Raises:
            BrokerNotInstalledError: moto is not installed.
            BrokerError: the server did not answer within ``timeout``; it is stopped again.
        """
        if importlib.util.find_spec("moto") is None:
            raise BrokerNotInstalledError(
                "Tansu's s3:// storage needs a local S3 server: pip install \"moto[server]\"")
        self.port = _free_port()
        with self._log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent)  # noqa: PLW1509 - as brokers._spawn
        try:
            self._create_bucket(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL if it lingers. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(_KILL_WAIT)
                return
            except subprocess.TimeoutExpired:
                continue

    def _create_bucket(self, deadline: float) -> None:
        request = urllib.request.Request(f"{self.url}/{BUCKET}", method="PUT")
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BrokerError(f"the S3 server exited ({self._proc.returncode}); see "
                                  f"{self._log_path}")
            try:
                with urllib.request.urlopen(request, timeout=1.0):
                    return
            except (urllib.error.URLError, OSError) as exc:
                if time.monotonic() >= deadline:
                    raise BrokerError(f"the S3 server on {self.url} did not answer: {exc}; "
                                      f"see {self._log_path}") from exc
                time.sleep(_POLL_INTERVAL)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port
