"""A small thread-safe least-recently-used map, shared by the per-process caches (the web's
rendered answers, the audit worker's snapshots)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

__all__ = ["LRU"]


class LRU:
    """At most ``entries`` values; the least recently used goes first. With ``ttl`` (seconds),
    an entry older than that is gone too."""

    def __init__(self, entries: int, *, ttl: float | None = None):
        self.entries, self.ttl = int(entries), ttl
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key) -> Any | None:
        with self._lock:
            found = self._data.get(key)
            if found is None:
                return None
            stored_at, value = found
            if self.ttl is not None and time.monotonic() - stored_at > self.ttl:
                del self._data[key]
                return None
            self._data.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            self._data[key] = (time.monotonic(), value)
            self._data.move_to_end(key)
            while len(self._data) > self.entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
