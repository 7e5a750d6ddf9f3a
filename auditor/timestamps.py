"""The time stamps Auditor accepts on annotations: from 1970-01-01 00:00 UTC to one day after now.

An annotation's time stamp places it in a weekly quality window, and the windows only go
forward in time: one row stamped ``9999-12-31`` made every later window (and the audit
computing them) overflow. So every door (file and JSON imports, the command line, Label
Studio's webhooks and pull sync) refuses a stamp outside this range, naming the row and
field; a day of slack covers clocks that run ahead and time zones east of UTC. Rows an
older version stored outside the range are left out of the quality windows, counted, and
the audit says so (:mod:`auditor.audit.quality`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["EARLIEST", "FUTURE_TOLERANCE", "bounds_us", "latest", "out_of_range", "refusal"]

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
"""The earliest time stamp accepted (the Unix epoch)."""
FUTURE_TOLERANCE = timedelta(days=1)
"""How far past the current time a time stamp may be."""


def latest(now: datetime | None = None) -> datetime:
    """The latest time stamp accepted at ``now`` (default: the current time)."""
    return (now or datetime.now(UTC)) + FUTURE_TOLERANCE


def out_of_range(ts: datetime, *, now: datetime | None = None) -> str | None:
    """Why the aware time stamp ``ts`` is refused, or None when it is in range."""
    if EARLIEST <= ts <= latest(now):
        return None
    return refusal(ts.isoformat(), now=now)


def refusal(shown: str, *, now: datetime | None = None) -> str:
    """The reason a time stamp (as the file wrote it, ``shown``) is refused."""
    return (f"{shown} is outside the accepted range of time stamps, {EARLIEST:%Y-%m-%d} to "
            f"{latest(now):%Y-%m-%dT%H:%MZ} (now + {FUTURE_TOLERANCE.days} day)")


def bounds_us(now: datetime | None = None) -> tuple[int, int]:
    """The accepted range in microseconds since the epoch (for vectorised checks)."""
    return 0, int(latest(now).timestamp()) * 1_000_000
