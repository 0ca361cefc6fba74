"""Steps: how the processor's decisions are written once and carried out by two fronts.

A decision that needs I/O is a generator: it *yields* each I/O it needs as an :class:`Io` value
(``Io("consumer", "poll_batch", (0.1,), {"max_records": 500})``: call that method of that port),
and is sent the result back (or thrown the exception). It touches no client, socket, thread or
event loop, so the sync and the asyncio front run the very same decisions; a subroutine is
``yield from``. A front is only the loop that carries the steps out, and that loop is the
clients' own (:mod:`eosclient._net.steps`), each ``Io`` made a call of the front's ports
(:func:`bound`): :func:`drive` calls each method on its sync ports; the asyncio front
(:func:`eosclient.aio.processor.adrive`) calls it on its async ports and awaits what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, NamedTuple, Protocol, TypeVar

from eosclient._net.steps import Call
from eosclient._net.steps import drive as drive_steps

__all__ = ["Io", "Ports", "Steps", "bound", "drive"]

_T = TypeVar("_T")


class Io(NamedTuple):
    """One I/O asked of the front: ``ports[port].method(*args, **kwargs)``."""

    port: str  # "consumer", "producer" or "front" (the front's own: transform, sleep, ...)
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] | None = None


Steps = Generator[Io, Any, _T]


class Ports(Protocol):
    """What a front hands :func:`drive`: its ports by name (a dict will do)."""

    def __getitem__(self, port: str, /) -> object: ...


def bound(ports: Ports) -> Callable[[Io], Call]:
    """How a front's driver makes each :class:`Io` a call of its ports' method."""
    return lambda io: Call(getattr(ports[io.port], io.method), io.args, io.kwargs)


def drive(steps: Steps[_T], ports: Ports) -> _T:
    """Carry ``steps`` out on sync ports, to their return value (or exception): the one
    driver of :mod:`eosclient._net.steps`, each :class:`Io` :func:`bound` to ``ports``."""
    return drive_steps(steps, bind=bound(ports))
