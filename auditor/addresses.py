"""What an email address of an alert channel (or the relay's sender) may be."""

from __future__ import annotations

import re

__all__ = ["valid_address"]

# A plain address: no display name, no comment, nothing a header could be split on.
_ADDRESS = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


def valid_address(address: str) -> bool:
    """A plain email address (``name@example.org``, at most 254 characters)."""
    return isinstance(address, str) and len(address) <= 254 and _ADDRESS.match(address) is not None
