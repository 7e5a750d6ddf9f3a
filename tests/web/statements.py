"""Counting the SQL statements a piece of work sends: shared by the tests that bound a
page's (or a query's) statements."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event
from sqlalchemy.engine import Engine


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The statements ``engine`` executes inside the block, in order (a list filled as they run)."""
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)
