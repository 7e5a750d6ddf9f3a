"""Auditor's statistics: pure numpy/scipy, usable on arrays or DataFrames.

Nothing here imports a database, web or task-queue library; every function takes
arrays (or count matrices) and keyword-only options and returns frozen dataclasses.
"""

from types import ModuleType as _ModuleType

from auditor.stats._validation import StatsInputError
from auditor.stats.counts import (
    Annotations,
    LabelCounts,
    annotations_from_records,
    annotations_from_wide,
    count_histogram,
    counts_from_records,
    counts_from_wide,
)

# --- certification bounds (Xu et al.) ---

# --- agreement coefficients ---

# --- survey equivalence (Resnick et al.) ---

# --- BEST performance (Lourie et al.) ---

__all__ = sorted(
    name for name, value in globals().items()
    if not name.startswith("_") and not isinstance(value, _ModuleType)
)
