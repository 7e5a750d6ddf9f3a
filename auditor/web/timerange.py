"""The time range of a page (overview, vendor, annotator, alerts, audit runs), kept in the URL.

``range`` is one of :data:`CHOICES`: the last 7, 30 or 90 days, ``visit`` (since the
user's previous visit), ``custom`` (``from`` and ``to``, dates, both days included) or
``all``. A value that is not understood falls back to the page's default, and says so;
nothing here refuses a request. The range is read into a :class:`TimeRange` whose
``start`` and ``end`` (UTC, end exclusive) the read models filter on.

A *visit* is a run of page views without a pause of :data:`VISIT_GAP`; the previous
visit ended when the user was last seen (``users.last_seen_at``, written at most every
:data:`TOUCH_EVERY` per session), and the session keeps where its visit began.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta

from flask import Flask, request, session
from sqlalchemy import select, update
from sqlalchemy.orm import Session

__all__ = ["CHOICES", "TimeRange", "note_visit", "time_range"]

CHOICES = ("7d", "30d", "90d", "visit", "custom", "all")
LABELS = {"7d": "last 7 days", "30d": "last 30 days", "90d": "last 90 days", "visit": "since my last visit",
          "custom": "custom dates", "all": "all time"}
_DAYS = {"7d": 7, "30d": 30, "90d": 90}
#: A pause this long between two page views starts a new visit.
VISIT_GAP = timedelta(hours=1)
#: How often a session writes when its user was last seen.
TOUCH_EVERY = timedelta(minutes=5)
#: The earliest date a custom range may start (older dates are clamped to it).
EARLIEST = date(2000, 1, 1)


@dataclass(frozen=True)
class TimeRange:
    """``start`` and ``end`` (UTC; ``end`` exclusive; None: unbounded) of the chosen range."""

    key: str
    start: datetime | None
    end: datetime | None
    default: str
    note: str | None = None

    @property
    def label(self) -> str:
        return LABELS[self.key]

    @property
    def bounded(self) -> bool:
        return self.start is not None or self.end is not None

    @property
    def first_day(self) -> date | None:
        return None if self.start is None else self.start.date()

    @property
    def last_day(self) -> date | None:
        """The last day inside the range (``end`` is the midnight after it)."""
        return None if self.end is None else (self.end - timedelta(microseconds=1)).date()

    def args(self) -> dict[str, str]:
        """The query parameters that choose this range on any page (links to other pages)."""
        if self.key == "custom":
            days = {"from": self.first_day, "to": self.last_day}
            return {"range": "custom", **{k: f"{d:%Y-%m-%d}" for k, d in days.items() if d is not None}}
        return {"range": self.key}

    def contains(self, when: datetime | None) -> bool:
        if when is None:
            return not self.bounded
        if when.tzinfo is None:  # SQLite gives naive UTC
            when = when.replace(tzinfo=UTC)
        return (self.start is None or when >= self.start) and (self.end is None or when < self.end)

    def where(self, column):
        """SQL conditions keeping ``column`` inside the range (a list, empty when unbounded)."""
        out = []
        if self.start is not None:
            out.append(column >= self.start)
        if self.end is not None:
            out.append(column < self.end)
        return out


def _day(raw: str | None) -> date | None:
    try:
        return date.fromisoformat((raw or "").strip()[:10]) if raw else None
    except ValueError:
        return None


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def time_range(args, *, default: str = "30d", now: datetime | None = None,
               last_visit: datetime | None = None) -> TimeRange:
    """The range the query string ``args`` chooses; ``default`` when it chooses none (or one
    not understood: then ``note`` says why)."""
    now = now or datetime.now(UTC)
    key = (args.get("range") or "").strip()[:16]
    if not key and (args.get("from") or args.get("to")):
        key = "custom"
    if not key:
        key = default
    if key not in CHOICES:
        return replace(time_range({}, default=default, now=now, last_visit=last_visit),
                       note=f"“{key[:16]}” is not a time range this page knows; showing {LABELS[default]}.")
    if key in _DAYS:
        return TimeRange(key, now - timedelta(days=_DAYS[key]), None, default)
    if key == "visit":
        if last_visit is None:
            fallback = time_range({}, default="7d", now=now)
            return TimeRange("7d", fallback.start, None, default,
                             "No earlier visit is recorded yet: showing the last 7 days.")
        if last_visit.tzinfo is None:
            last_visit = last_visit.replace(tzinfo=UTC)
        return TimeRange("visit", last_visit, None, default)
    if key == "custom":
        first, last = _day(args.get("from")), _day(args.get("to"))
        if first is None and last is None:
            return replace(time_range({}, default=default, now=now, last_visit=last_visit),
                           note=f"Give a first or a last day (YYYY-MM-DD) for custom dates; showing {LABELS[default]}.")
        if first is not None and last is not None and first > last:
            first, last = last, first
        latest = (now + timedelta(days=1)).date()
        first = None if first is None else min(max(first, EARLIEST), latest)
        last = None if last is None else min(max(last, EARLIEST), latest)
        return TimeRange("custom", None if first is None else _midnight(first),
                         None if last is None else _midnight(last + timedelta(days=1)), default)
    return TimeRange("all", None, None, default)


def last_visit() -> datetime | None:
    """When this session's user was last seen before the current visit (None: never)."""
    at = session.get("visit_from")
    return datetime.fromtimestamp(at, tz=UTC) if isinstance(at, int | float) else None


def note_visit(db: Session, user_id: int, *, now: datetime | None = None) -> None:
    """Record that the user is here (at most one write per :data:`TOUCH_EVERY` and session);
    after a pause of :data:`VISIT_GAP` a new visit starts, and the time the user was last
    seen becomes the start of "since my last visit"."""
    from auditor.db import User

    now = now or datetime.now(UTC)
    seen = session.get("seen")
    fresh = not isinstance(seen, int | float)
    if not fresh and now.timestamp() - seen < TOUCH_EVERY.total_seconds():
        return
    if fresh or now.timestamp() - seen >= VISIT_GAP.total_seconds():
        before = db.scalar(select(User.last_seen_at).where(User.id == user_id))
        if before is not None and before.tzinfo is None:
            before = before.replace(tzinfo=UTC)
        session["visit_from"] = None if before is None else before.timestamp()
    db.execute(update(User).where(User.id == user_id).values(last_seen_at=now))
    db.commit()
    session["seen"] = now.timestamp()


def page_range(default: str) -> TimeRange:
    """This request's range (its query string, the session's last visit)."""
    return time_range(request.args, default=default, last_visit=last_visit())


def init_app(app: Flask) -> None:
    # Globals, not a context processor: the picker is a macro, imported without the page's context.
    app.jinja_env.globals.update(range_labels=LABELS, range_choices=CHOICES)
