"""The worker's consumer: Celery's, surviving a broker that drops while a task runs.

With late acknowledgement (``task_acks_late``) a running audit holds an unacknowledged
message on the consumer's connection. When Redis goes away at that moment, Celery
(5.7) first ``collect()``s the lost connection, which detaches its transport
(``transport.client = None``), then ``close()``s it. Every later use of that
connection's Redis channel then builds a connection pool from the detached transport
and raises ``AttributeError: 'NoneType' object has no attribute 'hostname'``:

- the second close, which tries again to put the unacknowledged messages back because
  the first one failed on the dead socket before marking the channel closed;
- the acknowledgement of the audit when it finishes, on the channel it was delivered on.

That error is not a connection error, so Celery does not catch it: the worker stopped
with "Unrecoverable error", and one Redis restart during an audit took it down.

The consumer below keeps the lost connection's transport attached to its connection's
settings. The channel's late work then reaches the broker if it is back (the finished
audit's message is acknowledged, so it is not redelivered) or fails with a connection
error, which Celery logs and survives; the message then stays in Redis's
unacknowledged set and is redelivered after the visibility timeout (and if Redis lost
its data, the sweep re-enqueues the audit). Audits are keyed by dataset and data
version, so a redelivered one finds its work done.

It is configured as ``worker_consumer`` (:func:`auditor.worker.celery_config`).
"""

from __future__ import annotations

from celery.worker.consumer import Consumer as CeleryConsumer

__all__ = ["Consumer"]


class Consumer(CeleryConsumer):
    """Celery's consumer; a lost connection's transport stays attached to the
    connection's settings while, and after, Celery closes it."""

    def on_connection_error_after_connected(self, exc: BaseException) -> None:
        connection = self.connection
        transport = getattr(connection, "_transport", None)
        if transport is not None:
            close = connection.close

            def close_keeping_transport_attached() -> None:
                transport.client = connection
                try:
                    close()
                finally:
                    transport.client = connection

            # Celery calls ``ignore_errors(connection, connection.close)`` on this very
            # object after ``collect()``; the instance attribute wins for that call.
            connection.close = close_keeping_transport_attached
        super().on_connection_error_after_connected(exc)
