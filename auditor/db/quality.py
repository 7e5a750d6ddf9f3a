"""Quality over time in the service: each audit feeds the annotations that arrived since
the last one to the dataset's quality monitors, stores the touched windows and the
changes found, and returns the alerts they raise.

The statistics are :class:`auditor.stats.quality.QualityMonitor`'s (leave-one-out
agreement and gold accuracy per vendor and per annotator and week, with intervals; a
sequential change detector whose probability of *ever* raising a false alarm, over all
groups and all audits, is at most ``alpha``). Here they are kept incrementally: the
monitors' running sums and detector state live in ``quality_state`` as of a data
version, and an audit reads only the annotations written after it (a BRIN index on
``annotation.data_version`` finds them), so its cost follows the new data, not the
history.

Windows are calendar weeks (Monday 00:00 UTC) of each annotation's ``annotated_at``
(its import time when the file gave none), or, for a dataset created with
``quality_window="batch"`` (data without time stamps), one window per import batch. An annotation stamped before the newest
window already seen (a late upload of old work) is counted in that newest window: the
detector's looks go forward in time only.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import BigInteger, cast, delete, func, insert, select
from sqlalchemy.orm import Session

from auditor import timestamps
from auditor.db.models import (
    Annotation,
    Annotator,
    Dataset,
    ImportBatch,
    Item,
    QualityChange,
    QualityState,
    QualityWindow,
)
from auditor.stats.quality import QualityMonitor

__all__ = ["GROUPINGS", "SKIPPED_STAMPS", "WINDOW", "update_quality", "window_bounds"]

GROUPINGS = ("vendor", "annotator")
SKIPPED_STAMPS = "time_stamp_out_of_range"
WINDOW = timedelta(days=7)
#: Windows start on Mondays, 00:00 UTC.
_ORIGIN = datetime(1970, 1, 5, tzinfo=UTC)
_ORIGIN_S = int(_ORIGIN.timestamp())
_WINDOW_S = int(WINDOW.total_seconds())
# Ids per IN (...) list: bounded parameters per statement.
_IDS_PER_QUERY = 5_000
_READ_CHUNK = 200_000


def window_bounds(index: int) -> tuple[datetime, datetime]:
    """Start and end of week number ``index`` (weeks since Monday 5 January 1970)."""
    start = _ORIGIN + index * WINDOW
    return start, start + WINDOW


def _weeks(epoch_seconds: np.ndarray) -> np.ndarray:
    return (np.asarray(epoch_seconds, dtype=np.int64) - _ORIGIN_S) // _WINDOW_S


# Rows per server-side block: each block travels as one bytea of packed int8s.
_BLOCK_ROWS = 1_000_000


def _new_annotations_pg(session: Session, dataset_id: int, since: int, up_to: int, *, by_batch: bool):
    """PostgreSQL: the rows packed on the server into one ``bytea`` per block of item ids
    (``int8send`` of each field), read with one ``np.frombuffer`` each: no Python object
    and no protocol message per row."""
    from auditor.db.pgread import estimated_rows, id_blocks, item_range, raw_connection

    raw = raw_connection(session.connection())
    where = "annotation WHERE dataset_id = %s AND data_version > %s AND data_version <= %s"
    params = (dataset_id, since, up_to)
    lo, hi, _ = item_range(raw, dataset_id)
    n_blocks = max(1, -(-estimated_rows(raw, where, params) // _BLOCK_ROWS))
    # An infinite stamp (never accepted, but a database may hold anything) reads as far before 1970.
    when = "data_version" if by_batch else (
        "CASE WHEN isfinite(coalesce(annotated_at, created_at)) THEN "
        f"floor(extract(epoch FROM coalesce(annotated_at, created_at)))::int8 ELSE {_NO_STAMP} END")
    sql = ("SELECT string_agg(int8send(item_id) || int8send(annotator_id::int8) || int8send(label::int8) || "
           f"int8send({when}), ''::bytea) FROM {where}")
    # One block (a batch since the last audit): the data_version condition alone, which the
    # BRIN index serves (an item range would steer the planner to the key's full range).
    blocks = [((), "")] if n_blocks == 1 else [((a, b), " AND item_id BETWEEN %s AND %s")
                                                 for a, b in id_blocks(lo, hi, n_blocks)]
    parts = []
    with raw.cursor(binary=True) as cur:
        for extra, cond in blocks:
            cur.execute(sql + cond, (*params, *extra))
            data = cur.fetchone()[0]
            if data:
                parts.append(np.frombuffer(data, dtype=">i8").reshape(-1, 4))
    if not parts:
        return None
    return _columns(np.concatenate(parts).astype(np.int64), by_batch)


_NO_STAMP = -(2**62)


def _columns(arr: np.ndarray, by_batch: bool):
    """(item ids, annotator ids, labels, windows, in range) of the rows read.

    ``in range`` is False for rows stamped outside :mod:`auditor.timestamps`' range (stored
    by an older version): they stay in the items' counts but in no window. A year 9999
    overflowed the windows and, since late work counts in the newest window, would have
    held every later row.
    """
    if by_batch:
        return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), arr[:, 3], np.ones(arr.shape[0], bool)
    lo, hi = (x // 1_000_000 for x in timestamps.bounds_us())
    stamp = arr[:, 3]
    fine = (stamp >= lo) & (stamp <= hi)
    return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), _weeks(np.where(fine, stamp, lo)), fine


def _new_annotations(session: Session, dataset_id: int, since: int, up_to: int, *, by_batch: bool = False):
    """(item id, annotator id, label, window, in range) of the annotations written in
    (since, up_to]; the window is the week number, or with ``by_batch`` the data version of
    the import (see :func:`_columns`)."""
    if session.get_bind().dialect.name == "postgresql":
        return _new_annotations_pg(session, dataset_id, since, up_to, by_batch=by_batch)
    stamp = func.coalesce(Annotation.annotated_at, Annotation.created_at)
    when = Annotation.data_version if by_batch else cast(func.extract("epoch", stamp), BigInteger)
    stmt = (select(Annotation.item_id, Annotation.annotator_id, Annotation.label, when)
            .where(Annotation.dataset_id == dataset_id, Annotation.data_version > since,
                   Annotation.data_version <= up_to)
            .execution_options(yield_per=_READ_CHUNK))
    parts = [np.asarray(chunk, dtype=np.int64).reshape(-1, 4) for chunk in session.execute(stmt).partitions()]
    if not parts:
        return None
    return _columns(np.concatenate(parts), by_batch)


def _by_ids(session: Session, columns, key, ids: np.ndarray):
    out = []
    for start in range(0, ids.size, _IDS_PER_QUERY):
        chunk = [int(x) for x in ids[start:start + _IDS_PER_QUERY]]
        out += session.execute(select(*columns).where(key.in_(chunk))).all()
    return out


def _items(session: Session, dataset: Dataset, ids: np.ndarray, *, item_row: np.ndarray | None = None,
           labels: np.ndarray | None = None):
    """Label counts (rows in the order of ``ids``) and gold codes of these items.

    With ``item_row`` and ``labels`` (every annotation of the dataset up to the version,
    as on the first update) the counts are those annotations' own; otherwise the items'
    current counts are read by id.
    """
    n_labels = len(dataset.labels)
    gold = np.full(ids.size, -1, dtype=np.int64)
    if item_row is not None:
        counts = np.bincount(item_row * n_labels + labels, minlength=ids.size * n_labels).reshape(ids.size, n_labels)
        rows = session.execute(select(Item.id, Item.gold_label).where(Item.dataset_id == dataset.id,
                                                                      Item.gold_label.is_not(None))).all()
        if rows:
            gid = np.array([r[0] for r in rows], dtype=np.int64)
            pos = np.searchsorted(ids, gid)
            ok = (pos < ids.size) & (ids[np.minimum(pos, ids.size - 1)] == gid)
            gold[pos[ok]] = np.array([r[1] for r in rows], dtype=np.int64)[ok]
        return counts.astype(np.int64), gold
    counts = np.zeros((ids.size, n_labels), dtype=np.int64)
    found = {int(r[0]): r for r in _by_ids(session, (Item.id, Item.label_counts, Item.gold_label), Item.id, ids)}
    for i, item_id in enumerate(ids.tolist()):
        r = found.get(item_id)
        if r is None:
            continue
        if r[1]:
            counts[i, : len(r[1])] = r[1][:n_labels]
        if r[2] is not None:
            gold[i] = r[2]
    return counts, gold


def _load(row: QualityState | None, alpha: float) -> dict[str, QualityMonitor]:
    if row is None:
        return {g: QualityMonitor(alpha=alpha) for g in GROUPINGS}
    return {g: QualityMonitor.from_state(row.state[g]) for g in GROUPINGS}


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
    since = 0 if row is None else int(row.data_version)
    if up_to <= since:
        return []
    monitors = _load(row, alpha)
    by_batch = dataset.quality_window == "batch"
    bounds = _Bounds(session, dataset.id, by_batch)
    new = _new_annotations(session, dataset.id, since, up_to, by_batch=by_batch)
    alerts: list[dict[str, Any]] = []
    if new is not None:
        item_ids, annotator_ids, labels, week, in_range = new
        n_out = int(in_range.size - np.count_nonzero(in_range))
        if skipped is not None and n_out:
            skipped[SKIPPED_STAMPS] = skipped.get(SKIPPED_STAMPS, 0) + n_out
        items, item_row = np.unique(item_ids, return_inverse=True)
        # The first update reads every annotation up to the version: their counts are the items'.
        counts, gold = (_items(session, dataset, items, item_row=item_row, labels=labels) if since == 0
                        else _items(session, dataset, items))
        ann, ann_row = np.unique(annotator_ids, return_inverse=True)
        people = {int(r[0]): (r[1], r[2]) for r in _by_ids(session, (Annotator.id, Annotator.external_id,
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
                found = mon.add_batch(int(w), item=item_row[rows], group=group[rows], label=labels[rows],
                                      counts=counts, gold=gold)
                touched[grouping].add(int(w))
                for change in found:
                    alerts.append(_record_change(session, dataset, grouping, change, run_id, bounds))
                written["quality_change"] = written.get("quality_change", 0) + len(found)
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
                    f"{'the import of ' if bounds.by_batch else 'the week of '}{start:%Y-%m-%d} (evidence: family-wise false-alarm level {float(change['evidence']):.2g})"),
        "details": {"grouping": grouping, "group": group, "metric": change["metric"],
                    "direction": change["direction"], "start": start.isoformat(),
                    "detected_at": detected.isoformat(), "evidence": float(change["evidence"]), **values},
    }
