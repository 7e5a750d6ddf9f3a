"""Delivering stored alerts to a webhook (a JSON POST; the alerts are already in the database)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["post_alerts"]


def post_alerts(url: str, alerts: Sequence[Mapping[str, Any]], *, timeout: float = 10.0) -> int:
    """POST ``{"alerts": [...]}`` to ``url``; returns the HTTP status, raises on failure."""
    body = json.dumps({"alerts": list(alerts)}, default=str).encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "auditor"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return int(resp.status)
