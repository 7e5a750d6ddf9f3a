"""Quality over time in the service: each audit feeds the annotations that arrived since
the last one to the dataset's quality monitors, stores the touched windows and the
changes found, and returns the alerts they raise.

The statistics are :class:`auditor.stats.quality.QualityMonitor`'s (leave-one-out
agreement and gold accuracy per vendor and per annotator and week, with intervals; each
group measured against the other groups on the same items by a self-starting CUSUM
whose yearly false-alarm rate over all groups and the dataset level is ``alpha``; a shift
all groups share is raised once, as ``dataset_quality_changed``). They are kept
incrementally: the monitors' running sums and detector state live in ``quality_state``
as of a data version, and an audit reads only the annotations written after it (a BRIN
index on ``annotation.data_version`` finds them), so its cost follows the new data, not
the history.

Gold imported or changed after the annotations it judges (the common order) makes the
next audit rebuild the monitors from every annotation with the current gold (the gold
import marks the state stale), keeping the changes already reported; so do relabels
(an annotation replaced by its annotator), which would otherwise count twice.

Windows are calendar weeks (Monday 00:00 UTC) of each annotation's ``annotated_at``
(its import time when the file gave none), or, for a dataset created with
``quality_window="batch"`` (data without time stamps), one window per import batch. An
annotation stamped before the newest window already seen (a late upload of old work) is
counted in that newest window: the detector's looks go forward in time only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from auditor.db.models import (
    Annotator,
    Dataset,
    ImportBatch,
    QualityChange,
    QualityState,
    QualityWindow,
)
from auditor.db.quality import (
    GROUPINGS,
    SKIPPED_STAMPS,
    STALE,
    by_ids,
    item_counts,
    new_annotations,
    window_bounds,
)
from auditor.stats.quality import QualityMonitor

__all__ = ["GROUPINGS", "SKIPPED_STAMPS", "STALE", "mark_stale", "sensitivity", "update_quality"]


def _load(row: QualityState | None, alpha: float) -> dict[str, QualityMonitor]:
    if row is None:
        return {g: QualityMonitor(alpha=alpha) for g in GROUPINGS}
    monitors = {g: QualityMonitor.from_state(row.state[g]) for g in GROUPINGS}
    if int(row.data_version) == STALE:
        # rebuilt from every annotation; the changes already reported are not raised again
        fresh = {g: QualityMonitor(alpha=alpha) for g in GROUPINGS}
        for g in GROUPINGS:
            fresh[g].carry_reported(monitors[g])
        return fresh
    return monitors


def mark_stale(session: Session, dataset_id: int) -> None:
    """Make the next audit rebuild the dataset's quality monitors from every annotation (gold
    arrived or changed, or annotations were relabelled: windows already summed are affected)."""
    session.execute(QualityState.__table__.update().where(QualityState.dataset_id == dataset_id)
                    .values(data_version=STALE))


def sensitivity(session: Session, dataset_id: int, groupings: tuple[str, ...] = GROUPINGS
                ) -> dict[str, list[dict[str, Any]]]:
    """Per grouping, what the monitors can see: for each vendor (annotator) and metric, its
    units per window and the smallest drop detected within 4 windows with 90% probability
    (see :meth:`auditor.stats.quality.QualityMonitor.sensitivity`); empty before the first audit."""
    row = session.get(QualityState, dataset_id)
    if row is None:
        return {g: [] for g in groupings}
    return {g: QualityMonitor.from_state(row.state[g]).sensitivity() for g in groupings}


def update_quality(session: Session, dataset: Dataset, *, up_to: int, run_id: int | None,
                   alpha: float = 0.05, written: dict[str, int] | None = None,
                   skipped: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Feed the annotations of versions up to ``up_to`` not seen yet, store the windows they
    touched and the changes found; return the alerts (in the caller's transaction, with
    the dataset row locked by the caller). ``written``: the rows written, replaced or deleted
    are added to it by table name. ``skipped``: the rows left out of the windows (a time
    stamp outside the accepted range) are added to it under ``time_stamp_out_of_range``."""
    written = {} if written is None else written
    row = session.get(QualityState, dataset.id)
    stale = row is not None and int(row.data_version) == STALE
    since = 0 if row is None or stale else int(row.data_version)
    if up_to <= since:
        return []
    monitors = _load(row, alpha)
    by_batch = dataset.quality_window == "batch"
    bounds = _Bounds(session, dataset.id, by_batch)
    if stale:  # every window is rewritten from the rebuilt monitors
        gone = session.execute(delete(QualityWindow).where(QualityWindow.dataset_id == dataset.id))
        written["quality_window"] = written.get("quality_window", 0) + max(int(gone.rowcount or 0), 0)
    new = new_annotations(session, dataset.id, since, up_to, by_batch=by_batch)
    alerts: list[dict[str, Any]] = []
    if new is not None:
        item_ids, annotator_ids, labels, week, in_range = new
        n_out = int(in_range.size - np.count_nonzero(in_range))
        if skipped is not None and n_out:
            skipped[SKIPPED_STAMPS] = skipped.get(SKIPPED_STAMPS, 0) + n_out
        # the items of the new annotations and of the newest windows' kept labels (scored again
        # with these: labels of one item imported in different batches are paired)
        kept = [m.open_items() for m in monitors.values()]
        items = np.unique(np.concatenate([np.asarray(item_ids, dtype=np.int64), *kept]))
        item_row = np.searchsorted(items, item_ids)
        # The first update reads every annotation up to the version: their counts are the items'.
        counts, gold = (item_counts(session, dataset, items, item_row=item_row, labels=labels) if since == 0
                        else item_counts(session, dataset, items))
        ann, ann_row = np.unique(annotator_ids, return_inverse=True)
        people = {int(r[0]): (r[1], r[2]) for r in by_ids(session, (Annotator.id, Annotator.external_id,
                                                                      Annotator.vendor), Annotator.id, ann)}
        names = np.array([people.get(int(a), (str(a), None))[0] for a in ann], dtype=object)
        vendors = np.array([people.get(int(a), (None, None))[1] for a in ann], dtype=object)
        groups = {"annotator": names[ann_row], "vendor": vendors[ann_row]}
        touched: dict[str, set[int]] = {g: set() for g in GROUPINGS}
        for grouping, mon in monitors.items():
            group = groups[grouping]
            keep = np.array([g is not None for g in group], dtype=bool) & in_range
            last = int(mon.windows[-1]) if mon.windows else None
            wk = week if last is None else np.maximum(week, last)  # late work counts in the newest window
            for w in np.unique(wk[keep]):
                rows = np.flatnonzero(keep & (wk == w))
                n_level = len(mon.dataset_changes())
                found = mon.add_batch(int(w), item=item_row[rows], group=group[rows], label=labels[rows],
                                      counts=counts, gold=gold, keys=items)
                touched[grouping].add(int(w))
                for change in found:
                    alerts.append(_record_change(session, dataset, grouping, change, run_id, bounds))
                written["quality_change"] = written.get("quality_change", 0) + len(found)
                if grouping == "vendor":  # the level all groups share: once, from the vendor monitor
                    for change in mon.dataset_changes().iloc[n_level:].to_dict("records"):
                        alerts.append(_record_dataset_change(session, dataset, change, run_id, bounds))
                        written["quality_change"] = written.get("quality_change", 0) + 1
            n = _store_windows(session, dataset.id, grouping, mon, sorted(touched[grouping]), run_id, bounds)
            written["quality_window"] = written.get("quality_window", 0) + n
    state = {g: m.to_state() for g, m in monitors.items()}
    if row is None:
        session.add(QualityState(dataset_id=dataset.id, data_version=up_to, state=state))
    else:
        row.data_version, row.state, row.updated_at = up_to, state, datetime.now(UTC)
    session.flush()
    return alerts


class _Bounds:
    """Start and end of a window: its calendar week, or its import batch's time (``by_batch``)."""

    def __init__(self, session: Session, dataset_id: int, by_batch: bool):
        self.session, self.dataset_id, self.by_batch = session, dataset_id, by_batch
        self._batches: dict[int, datetime] = {}

    def __call__(self, window: int) -> tuple[datetime, datetime]:
        if not self.by_batch:
            return window_bounds(window)
        if window not in self._batches:
            at = self.session.scalar(select(func.min(ImportBatch.created_at)).where(
                ImportBatch.dataset_id == self.dataset_id, ImportBatch.data_version == window))
            at = at or datetime.now(UTC)
            self._batches[window] = at if at.tzinfo else at.replace(tzinfo=UTC)
        return self._batches[window], self._batches[window]


def _store_windows(session: Session, dataset_id: int, grouping: str, mon: QualityMonitor, weeks: list[int],
                   run_id: int | None, bounds: _Bounds) -> int:
    """Replace the rows of the windows this audit added to (their sums only grew); return the
    number of rows deleted and inserted."""
    if not weeks:
        return 0
    gone = session.execute(delete(QualityWindow).where(
        QualityWindow.dataset_id == dataset_id, QualityWindow.grouping == grouping,
        QualityWindow.window_key.in_([int(w) for w in weeks])))
    now = datetime.now(UTC)
    rows = [{"dataset_id": dataset_id, "grouping": grouping, "group_name": str(r["group"])[:512],
             "metric": r["metric"], "window_key": int(r["window"]), "window_start": bounds(r["window"])[0],
             "window_end": bounds(r["window"])[1], "n_items": r["n_units"], "n_labels": r["n_labels"],
             "value": _finite(r["value"]), "low": _finite(r["low"]), "high": _finite(r["high"]),
             "audit_run_id": run_id, "updated_at": now} for r in mon.window_rows(weeks)]
    for start in range(0, len(rows), 2000):
        session.execute(insert(QualityWindow), rows[start:start + 2000])
    return max(int(gone.rowcount or 0), 0) + len(rows)


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _record_change(session: Session, dataset: Dataset, grouping: str, change: dict, run_id: int | None,
                   bounds: _Bounds) -> dict[str, Any]:
    start = bounds(int(change["start"]))[0]
    detected = bounds(int(change["detected_at"]))[1]
    values = {k: float(change[k]) for k in ("before", "before_low", "before_high", "after", "after_low",
                                            "after_high")}
    group = str(change["group"])[:512]
    session.add(QualityChange(dataset_id=dataset.id, audit_run_id=run_id, grouping=grouping, group_name=group,
                              metric=change["metric"], direction=change["direction"], detected_at=detected,
                              start=start, evidence=float(change["evidence"]), **values))
    what = "agreement with the other annotators" if change["metric"] == "agreement" else "accuracy on gold items"
    verb = "dropped" if change["direction"] == "drop" else "rose"
    return {
        "kind": f"{grouping}_quality_changed",
        "severity": "critical" if change["direction"] == "drop" else "info",
        "subject": group[:200],
        "message": (f"{grouping} {group}: {what} {verb} from {values['before']:.3f} "
                    f"[{values['before_low']:.3f}, {values['before_high']:.3f}] to {values['after']:.3f} "
                    f"[{values['after_low']:.3f}, {values['after_high']:.3f}] since "
                    f"{'the import of ' if bounds.by_batch else 'the week of '}{start:%Y-%m-%d} (evidence: yearly false-alarm rate {float(change['evidence']):.2g})"),
        "details": {"grouping": grouping, "group": group, "metric": change["metric"],
                    "direction": change["direction"], "start": start.isoformat(),
                    "detected_at": detected.isoformat(), "evidence": float(change["evidence"]), **values},
    }


def _record_dataset_change(session: Session, dataset: Dataset, change: dict, run_id: int | None,
                           bounds: _Bounds) -> dict[str, Any]:
    start = bounds(int(change["start"]))[0]
    detected = bounds(int(change["detected_at"]))[1]
    before, after = float(change["before"]), float(change["after"])
    session.add(QualityChange(dataset_id=dataset.id, audit_run_id=run_id, grouping="dataset",
                              group_name="all items", metric=change["metric"], direction=change["direction"],
                              detected_at=detected, start=start, evidence=float(change["evidence"]),
                              before=before, before_low=before, before_high=before, after=after, after_low=after,
                              after_high=after))
    what = "agreement among the annotators" if change["metric"] == "agreement" else "accuracy on gold items"
    easier = change["direction"] == "rise"
    return {
        "kind": "dataset_quality_changed",
        "severity": "warning",
        "subject": dataset.name[:200],
        "message": (f"dataset {dataset.name}: {what} of every vendor together {'rose' if easier else 'dropped'} "
                    f"from {before:.3f} to {after:.3f} since {'the import of ' if bounds.by_batch else 'the week of '}"
                    f"{start:%Y-%m-%d}: the items got {'easier' if easier else 'harder'} (or all vendors changed "
                    f"at once); no vendor is blamed for it (evidence: yearly false-alarm rate "
                    f"{float(change['evidence']):.2g})"),
        "details": {"grouping": "dataset", "metric": change["metric"], "direction": change["direction"],
                    "start": start.isoformat(), "detected_at": detected.isoformat(),
                    "evidence": float(change["evidence"]), "before": before, "after": after},
    }
