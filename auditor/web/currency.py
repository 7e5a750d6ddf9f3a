"""The workspace's currency: every cost a page shows is in it (``workspace.currency``, an ISO
4217 code; USD unless an admin sets another on the vendors page). A vendor's price keeps the
currency it was set in, which is the workspace's unless given."""

from __future__ import annotations

import math
import re

from flask import Flask, g
from markupsafe import Markup
from sqlalchemy import select

from auditor.web.db import get_session

__all__ = ["DEFAULT_CURRENCY", "init_app", "money", "valid_currency", "workspace_currency"]

DEFAULT_CURRENCY = "USD"
_CODE = re.compile(r"[A-Za-z]{3,8}")


def valid_currency(raw: str | None) -> str | None:
    """The code upper-cased, or None when it is not 3 to 8 letters."""
    raw = (raw or "").strip()
    return raw.upper() if _CODE.fullmatch(raw) else None


def workspace_currency() -> str:
    """The caller's workspace's currency (read once per request)."""
    if "workspace_currency" not in g:
        from auditor.db import Workspace

        principal = g.get("principal")
        code = None if principal is None else get_session().scalar(
            select(Workspace.currency).where(Workspace.id == principal.workspace_id))
        g.workspace_currency = code or DEFAULT_CURRENCY
    return g.workspace_currency


def money(x, digits: int = 2) -> Markup | str:
    """An amount with the workspace's currency: "1,234.50 USD"."""
    if not isinstance(x, int | float) or not math.isfinite(x):
        return Markup('<span class="na">–</span>')
    return Markup('<span class="money">{} <small>{}</small></span>').format(f"{x:,.{digits}f}", workspace_currency())


def init_app(app: Flask) -> None:
    app.add_template_filter(money)
    app.jinja_env.globals["workspace_currency"] = workspace_currency
