"""The embedded broker (kombu's SQLAlchemy transport) serving its queues in order.

kombu's virtual transports poll a worker's queues round robin, starting after the queue
last served: with an audit and a plan waiting, a worker that has just taken an audit
takes the plan next. :class:`Transport` polls them in the worker's order every time
(audits first, :func:`auditor.worker.worker_queues`), as the Redis transport does with
``queue_order_strategy = "priority"``. :func:`install` makes it the transport of the
``sqla+`` and ``sqlalchemy+`` broker URLs in this process.
"""

from __future__ import annotations

from queue import Empty

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport.sqlalchemy import Channel as _SqlaChannel
from kombu.transport.sqlalchemy import Transport as _SqlaTransport
from kombu.utils.scheduling import FairCycle

__all__ = ["Channel", "InOrderCycle", "Transport", "install"]


class InOrderCycle(FairCycle):
    """Each poll tries the queues from the first, in order: the first that has a message serves it."""

    def get(self, callback, **kwargs):
        for resource in list(self.resources):
            try:
                return self.fun(resource, callback, **kwargs)
            except self.predicate:
                continue
        raise self.predicate()


class Channel(_SqlaChannel):
    def _reset_cycle(self):
        self._cycle = InOrderCycle(self._get_and_deliver, self._active_queues, Empty)


class Transport(_SqlaTransport):
    Channel = Channel


def install() -> None:
    """The ``sqla`` and ``sqlalchemy`` broker URLs use :class:`Transport` in this process."""
    for alias in ("sqla", "sqlalchemy"):
        TRANSPORT_ALIASES[alias] = f"{__name__}:Transport"
