"""Sortable, filterable, paginated tables for the dashboards, sorted and paged on the server.

A page's table reads its state from the query string (``sort``, ``dir``, ``q``, ``page``,
``per_page``, each with the table's prefix when a page has several), refuses nothing
(an unknown column or a bad number falls back to the default), and bounds the work:
at most :data:`MAX_PER_PAGE` rows per page, pages up to :data:`MAX_ROWS` rows deep,
and totals counted up to :data:`COUNT_CAP` (beyond that a table says "more than").
The headings are links that sort by their column (again: the other way), so tables
work without scripts; the filter is a GET form.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from flask import request
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

__all__ = ["COUNT_CAP", "MAX_PER_PAGE", "MAX_ROWS", "Column", "Table", "count_capped", "like_pattern", "table_state"]

PER_PAGE_CHOICES = (10, 25, 50, 100)
MAX_PER_PAGE = max(PER_PAGE_CHOICES)
#: How deep a table pages (OFFSET stays bounded); a filter narrows further.
MAX_ROWS = 10_000
#: Totals are counted up to this many rows.
COUNT_CAP = 10_000
MAX_QUERY = 100


@dataclass(frozen=True)
class Column:
    """A column: ``key`` names it in the URL; ``sortable`` columns sort by it, ``numeric`` ones
    first in ``first`` order ("asc": the lowest, e.g. the weakest annotators, on top)."""

    key: str
    label: str
    sortable: bool = True
    numeric: bool = False
    first: str = "asc"
    title: str | None = None
    css: str = ""


@dataclass
class Table:
    id: str
    columns: Sequence[Column]
    sort: str
    direction: str
    q: str
    page: int
    per_page: int
    prefix: str = ""
    default_sort: str = ""
    default_direction: str = "asc"
    filters: dict[str, str] = field(default_factory=dict)
    rows: list[Any] = field(default_factory=list)
    total: int | None = None
    capped: bool = False
    has_next: bool = False
    query_label: str = "filter"
    #: Parameters that only make sense for the current order and filter (a keyset position):
    #: dropped when either changes.
    volatile: tuple[str, ...] = ()
    #: Every filter parameter the table reads (chosen or not).
    filter_names: tuple[str, ...] = ()

    # --- URLs -----------------------------------------------------------------------------

    def _param(self, name: str) -> str:
        return self.prefix + name

    def url(self, **changes: Any) -> str:
        """This page's URL with the table's state changed (other query parameters kept)."""
        args: dict[str, list[str]] = {k: list(v) for k, v in request.args.lists()}
        for key, value in changes.items():
            name = self._param(key) if key in ("sort", "dir", "q", "page", "per_page") else key
            if value is None or value == "":
                args.pop(name, None)
            else:
                args[name] = [str(value)]
        query = urlencode([(k, v) for k, vs in args.items() for v in vs])
        return quote(request.path) + ("?" + query if query else "")

    def clear_url(self) -> str:
        """This page without the table's filter, its other filters and its page."""
        return self.url(q=None, page=None, **dict.fromkeys((*self.filter_names, *self.volatile)))

    def sort_url(self, column: Column) -> str:
        if column.key == self.sort:
            direction = "desc" if self.direction == "asc" else "asc"
        else:
            direction = column.first
        return self.url(sort=column.key, dir=direction, page=None, **dict.fromkeys(self.volatile))

    def aria_sort(self, column: Column) -> str | None:
        if column.key != self.sort:
            return None
        return "ascending" if self.direction == "asc" else "descending"

    def hidden_inputs(self) -> list[tuple[str, str]]:
        """Query parameters the filter form keeps (every one but the filter and the page)."""
        skip = {self._param("q"), self._param("page"), *self.filter_names, *self.volatile}
        return [(k, v) for k, vs in request.args.lists() if k not in skip for v in vs]

    def param(self, name: str) -> str:
        return self._param(name)

    # --- pages -----------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per_page

    @property
    def n_pages(self) -> int | None:
        if self.total is None:
            return None
        return max(1, math.ceil(self.total / self.per_page))

    @property
    def first_row(self) -> int:
        return self.offset + 1 if self.rows else 0

    @property
    def last_row(self) -> int:
        return self.offset + len(self.rows)

    @property
    def has_previous(self) -> bool:
        return self.page > 1

    def page_rows(self, rows: Sequence[Any]) -> None:
        """This page of ``rows`` (all of them already sorted and filtered)."""
        self.total, self.capped = len(rows), False
        self.rows = list(rows[self.offset:self.offset + self.per_page])
        self.has_next = self.offset + self.per_page < len(rows)

    def sort_rows(self, rows: Iterable[Any], keys: Mapping[str, Callable[[Any], Any]],
                  tiebreak: Callable[[Any], Any] | None = None) -> list[Any]:
        """``rows`` sorted by the table's column (``keys[column]`` gives a row's value); empty
        values last either way, ties in ``tiebreak`` order."""
        rows = list(rows)
        if tiebreak is not None:
            rows.sort(key=tiebreak)
        key = keys.get(self.sort)
        if key is None:
            return rows
        present = [r for r in rows if _present(key(r))]
        missing = [r for r in rows if not _present(key(r))]
        present.sort(key=lambda r: _sortable(key(r)), reverse=self.direction == "desc")
        return present + missing

    def sql_order(self, stmt: Select, expressions: Mapping[str, Any], *tiebreak) -> Select:
        """``stmt`` ordered by the table's column (empty values last), then ``tiebreak``."""
        # (not `get(...) or ...`: a SQL expression has no truth value)
        expr = expressions[self.sort] if self.sort in expressions else expressions[self.default_sort]
        direction = self.direction if self.sort in expressions else self.default_direction
        ordered = expr.desc() if direction == "desc" else expr.asc()
        return stmt.order_by(ordered.nulls_last(), *(t.desc() if direction == "desc" else t.asc() for t in tiebreak))

    def fetch(self, db: Session, stmt: Select, *, count: bool = True, scalars: bool = False) -> None:
        """One page of ``stmt`` (ordered already), and its total counted up to :data:`COUNT_CAP`."""
        page = stmt.limit(self.per_page + 1).offset(self.offset)
        rows = list(db.scalars(page)) if scalars else list(db.execute(page).all())
        self.has_next = len(rows) > self.per_page
        self.rows = rows[: self.per_page]
        if count:
            self.total, self.capped = count_capped(db, stmt)


def _present(value: Any) -> bool:
    return value is not None and value == value and value != ""  # NaN is not present


def _sortable(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def count_capped(db: Session, stmt: Select, cap: int = COUNT_CAP) -> tuple[int, bool]:
    """Rows of ``stmt`` up to ``cap``: (count, whether there are more)."""
    inner = stmt.order_by(None).limit(cap + 1).subquery()
    n = db.scalar(select(func.count()).select_from(inner)) or 0
    return min(n, cap), n > cap


def like_pattern(q: str) -> str:
    """``%q%`` for a ``LIKE ... ESCAPE '\\'``: the filter's own ``%``, ``_`` and ``\\`` match themselves."""
    return "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _int(value: str | None, default: int, lo: int, hi: int) -> int:
    try:
        n = int(value) if value is not None else default
    except ValueError:
        return default
    return min(max(n, lo), hi)


def table_state(table_id: str, columns: Sequence[Column], *, default_sort: str, default_direction: str = "asc",
                per_page: int = 50, prefix: str = "", args: Mapping[str, str] | None = None,
                filters: Mapping[str, Sequence[str] | None] | None = None, query_label: str = "filter") -> Table:
    """The table's state from the query string ``args`` (the request's; none: the defaults).

    ``filters`` maps a filter's parameter to its allowed values (None: free text, bounded);
    a value not allowed is ignored."""
    args = {} if args is None else args
    by_key = {c.key: c for c in columns if c.sortable}
    sort = args.get(prefix + "sort", default_sort)
    if sort not in by_key:
        sort = default_sort
    direction = args.get(prefix + "dir", "")
    if direction not in ("asc", "desc"):
        direction = default_direction if sort == default_sort else by_key[sort].first
    n = _int(args.get(prefix + "per_page"), per_page, 1, MAX_PER_PAGE)
    n = n if n in PER_PAGE_CHOICES else per_page
    page = _int(args.get(prefix + "page"), 1, 1, max(1, MAX_ROWS // n))
    q = (args.get(prefix + "q") or "").strip()[:MAX_QUERY]
    chosen: dict[str, str] = {}
    for name, allowed in (filters or {}).items():
        value = (args.get(name) or "").strip()[:MAX_QUERY]
        if value and (allowed is None or value in allowed):
            chosen[name] = value
    return Table(table_id, list(columns), sort, direction, q, page, n, prefix, default_sort, default_direction,
                 chosen, query_label=query_label, filter_names=tuple(filters or ()))
