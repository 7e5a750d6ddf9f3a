"""What every connector raises: one :class:`ConnectorError` for Label Studio and MLflow alike."""

from __future__ import annotations

__all__ = ["ConnectorError"]


class ConnectorError(Exception):
    """A connector cannot run or serve as asked (a bad option, a client not installed, no
    token, a server unreachable or refusing); the message says which. ``retryable``: the
    same call may succeed later."""

    retryable = False
