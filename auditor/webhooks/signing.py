"""Signing outgoing webhook requests, and checking a signature as a receiver would.

Each request carries ``X-Auditor-Signature: t=<unix time>,v1=<hex>``, where ``<hex>`` is
HMAC-SHA256, keyed with the webhook's secret, of ``"<unix time>." + body`` (the body's
exact bytes). A receiver recomputes it, compares in constant time, and refuses a
timestamp older (or newer) than its tolerance, so a captured request cannot be replayed
later. :func:`verify` is that check; the README shows the same recipe without Auditor.
"""

from __future__ import annotations

import hashlib
import hmac
import time

__all__ = ["SIGNATURE_HEADER", "TOLERANCE_SECONDS", "sign", "signature_header", "verify"]

SIGNATURE_HEADER = "X-Auditor-Signature"
TOLERANCE_SECONDS = 300
"""How far a receiver should let the signed time stamp be from its own clock."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``"<timestamp>." + body`` keyed with ``secret``."""
    message = str(int(timestamp)).encode("ascii") + b"." + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, *, timestamp: int | None = None) -> str:
    """The value of :data:`SIGNATURE_HEADER` for ``body`` sent now (or at ``timestamp``)."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    return f"t={ts},v1={sign(secret, ts, body)}"


def verify(secret: str, header: str, body: bytes, *, tolerance: float = TOLERANCE_SECONDS,
           now: float | None = None) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` at a time within ``tolerance`` seconds of ``now``."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    try:
        ts = int(fields["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - ts) > tolerance:
        return False
    expected = sign(secret, ts, body)
    return any(hmac.compare_digest(expected, v) for v in fields.get("v1", []))
