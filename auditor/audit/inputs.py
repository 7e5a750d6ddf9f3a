"""What an audit takes: one dataset's snapshot as arrays (:class:`AuditSnapshot`), its
releases' predictions (:class:`ReleaseSnapshot`) and what the previous audit said
(:class:`PreviousResults`).

Plain data (numpy arrays and tuples), with no database behind them: the snapshot
repository (:func:`auditor.audit.snapshot.load_audit_snapshot`) fills them from the
database, and a notebook or a benchmark can build them from files
(``bench/bench_real_audits.py`` does) and run :mod:`auditor.audit.pipeline` on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AuditSnapshot", "PreviousResults", "ReleaseSnapshot"]


@dataclass(frozen=True)
class ReleaseSnapshot:
    """One release's predictions, aligned with the snapshot's items by position."""

    release_id: int
    model: str
    version: str
    item_index: np.ndarray
    labels: np.ndarray
    probabilities: np.ndarray | None


@dataclass(frozen=True)
class PreviousResults:
    """What the last succeeded audit said, for alerts on changes."""

    run_id: int | None = None
    certifications: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    vendors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditSnapshot:
    """Everything an audit reads, as of one ``data_version``.

    ``counts`` is (N, L) from the per-item counts kept at ingestion, rows in the order
    of ``item_ids`` (database ids, which also name the items in the statistics);
    ``ann_*`` are positions into ``item_ids`` / ``annotator_ids`` and label codes.
    """

    dataset_id: int
    workspace_id: int
    name: str
    labels: tuple[str, ...]
    data_version: int
    item_ids: np.ndarray
    counts: np.ndarray
    gold: np.ndarray
    ann_item: np.ndarray
    ann_annotator: np.ndarray
    ann_label: np.ndarray
    annotator_ids: np.ndarray
    annotator_names: tuple[str, ...]
    annotator_vendors: tuple[str | None, ...]
    annotator_tiers: tuple[str, ...]
    releases: tuple[ReleaseSnapshot, ...]
    previous: PreviousResults

    @property
    def n_annotations(self) -> int:
        return int(self.ann_item.shape[0])
