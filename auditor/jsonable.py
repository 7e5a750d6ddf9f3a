"""Values made ready for JSON (and for JSON columns): JSON has no NaN or infinity, and
numpy's scalars and arrays are not JSON. One place for the rule, used by the audit's
results, the API's answers and the pipeline's summaries."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["finite", "plain"]


def finite(x) -> float | None:
    """``x`` as a float, or None when it is None, NaN or infinite."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def plain(obj: Any) -> Any:
    """JSON-ready copy: mappings (keys as strings), sequences and numpy arrays to Python
    containers, numpy scalars to Python numbers, NaN/inf floats to None."""
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, np.bool_ | bool):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        return finite(obj)
    return obj
