"""Low-level readers of the service's quality step (:mod:`auditor.audit.quality`): the
annotations written in a range of data versions, packed on the server, and the items'
current label counts and gold labels.

The statistics are :class:`auditor.stats.quality.QualityMonitor`'s (leave-one-out
agreement and gold accuracy per vendor and per annotator and week, with intervals; a
self-starting CUSUM per group whose yearly false-alarm rate, over all groups of a
dataset and its dataset level, is ``alpha``). Here they are kept incrementally: the
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

import numpy as np
from sqlalchemy import BigInteger, cast, func, select
from sqlalchemy.orm import Session

from auditor import timestamps
from auditor.db.models import Annotation, Dataset, Item

__all__ = ["GROUPINGS", "SKIPPED_STAMPS", "STALE", "WINDOW", "by_ids", "item_counts", "new_annotations", "window_bounds"]

GROUPINGS = ("vendor", "annotator")
SKIPPED_STAMPS = "time_stamp_out_of_range"
#: ``quality_state.data_version`` of a state to rebuild from every annotation at the next audit
#: (gold arrived or changed, or a label was replaced, after the windows were summed).
STALE = -1
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


def new_annotations(session: Session, dataset_id: int, since: int, up_to: int, *, by_batch: bool = False):
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


def by_ids(session: Session, columns, key, ids: np.ndarray):
    out = []
    for start in range(0, ids.size, _IDS_PER_QUERY):
        chunk = [int(x) for x in ids[start:start + _IDS_PER_QUERY]]
        out += session.execute(select(*columns).where(key.in_(chunk))).all()
    return out


def item_counts(session: Session, dataset: Dataset, ids: np.ndarray, *, item_row: np.ndarray | None = None,
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
    found = {int(r[0]): r for r in by_ids(session, (Item.id, Item.label_counts, Item.gold_label), Item.id, ids)}
    for i, item_id in enumerate(ids.tolist()):
        r = found.get(item_id)
        if r is None:
            continue
        if r[1]:
            counts[i, : len(r[1])] = r[1][:n_labels]
        if r[2] is not None:
            gold[i] = r[2]
    return counts, gold
