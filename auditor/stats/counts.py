"""Label-count matrices and annotation tables built from long or wide data.

Every anonymous statistic of Auditor depends on the data only through the per-item
label-count vectors; per-annotator statistics need who gave which label.
:class:`Annotations` keeps the long form (item, annotator, label codes) with the
names of items, annotators and labels; :class:`LabelCounts` the (N, L) count matrix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from auditor.stats.validation import StatsInputError, as_count_matrix

if TYPE_CHECKING:  # pandas loads pyarrow: imported where a function uses it
    import pandas as pd

__all__ = [
    "Annotations",
    "LabelCounts",
    "RowHistogram",
    "annotations_from_records",
    "annotations_from_wide",
    "as_counts",
    "count_histogram",
    "counts_from_records",
    "counts_from_wide",
    "row_histogram",
    "tally_counts",
]


@dataclass(frozen=True)
class LabelCounts:
    """Per-item label counts with the names of the items and labels.

    Attributes
    ----------
    counts : ndarray of int64, shape (N, L)
        ``counts[n, c]`` is how many annotators gave item ``n`` label ``c``.
    labels : tuple
        The ordered label set; column ``c`` is ``labels[c]``.
    items : tuple
        Item identifiers, row ``n`` is ``items[n]``.
    """

    counts: np.ndarray
    labels: tuple
    items: tuple

    def __array__(self, dtype=None, copy=None):
        return self.counts if dtype is None else self.counts.astype(dtype)

    def __len__(self) -> int:
        return self.counts.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        return self.counts.shape

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.counts, index=pd.Index(self.items, name="item"), columns=list(self.labels))


@dataclass(frozen=True)
class Annotations:
    """Long-form annotations as integer codes, with the names behind the codes.

    Attributes
    ----------
    item, annotator, label : ndarray of int64, shape (M,)
        Codes into ``items``, ``annotators`` and ``labels``; one row per annotation,
        at most one per (item, annotator).
    items, annotators, labels : tuple
        Names. Every item and annotator has at least one annotation.
    """

    item: np.ndarray
    annotator: np.ndarray
    label: np.ndarray
    items: tuple
    annotators: tuple
    labels: tuple
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def n_items(self) -> int:
        return len(self.items)

    @property
    def n_annotators(self) -> int:
        return len(self.annotators)

    @property
    def n_labels(self) -> int:
        return len(self.labels)

    def __len__(self) -> int:
        return int(self.item.shape[0])

    def counts(self) -> LabelCounts:
        """The (N, L) label-count matrix (one row per item of this table)."""
        if "counts" not in self._cache:
            counts = tally_counts(self.item, self.label, self.n_items, self.n_labels)
            self._cache["counts"] = LabelCounts(counts, self.labels, self.items)
        return self._cache["counts"]

    def matrix(self) -> np.ndarray:
        """Item × annotator matrix of label codes, ``-1`` where an annotator gave no label."""
        out = np.full((self.n_items, self.n_annotators), -1, dtype=np.int64)
        out[self.item, self.annotator] = self.label
        return out

    def subset(self, annotators: Iterable) -> Annotations:
        """The annotations of the named annotators only (e.g. one vendor's pool).

        Items keep their order; items none of them labeled are dropped.
        """
        wanted = set(annotators)
        unknown = wanted - set(self.annotators)
        if unknown:
            raise StatsInputError(f"`annotators` names unknown annotator(s): {sorted(map(str, unknown))[:5]}.")
        codes = np.array([i for i, a in enumerate(self.annotators) if a in wanted], dtype=np.int64)
        keep = np.isin(self.annotator, codes)
        item_codes, item_new = np.unique(self.item[keep], return_inverse=True)
        ann_codes, ann_new = np.unique(self.annotator[keep], return_inverse=True)
        return Annotations(
            item=item_new.astype(np.int64),
            annotator=ann_new.astype(np.int64),
            label=self.label[keep],
            items=tuple(self.items[i] for i in item_codes),
            annotators=tuple(self.annotators[a] for a in ann_codes),
            labels=self.labels,
        )

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({
            "item_id": np.asarray(self.items, dtype=object)[self.item],
            "annotator_id": np.asarray(self.annotators, dtype=object)[self.annotator],
            "label": np.asarray(self.labels, dtype=object)[self.label],
        })


_DIGITS = re.compile(r"(\d+)")


def natural_key(value):
    """Sort key that orders strings naturally: digit runs compare as numbers.

    Inferred label sets use it, so ``'1', '2', '10'`` (and ``'c2' < 'c10'``) come in
    numeric order instead of ``'1', '10', '2'``; numbers sort by value, other values
    as they are.
    """
    if isinstance(value, str):
        return (1, tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in _DIGITS.split(value) if p))
    if isinstance(value, bool | np.bool_):
        return (2, (int(value),))
    if isinstance(value, int | float | np.integer | np.floating):
        return (0, (float(value),))
    return (3, (value,))


def _label_codes(values: np.ndarray, labels: Sequence | None, *, row_offset: int = 0,
                 field_name: str = "label") -> tuple[np.ndarray, tuple]:
    """Map label values to codes in ``labels`` (inferred, sorted, when not given)."""
    import pandas as pd

    if labels is None:
        uniq = pd.unique(values)
        try:
            labels = tuple(sorted(uniq, key=natural_key))
        except TypeError:
            labels = tuple(uniq)
    else:
        labels = tuple(labels)
        if len(set(labels)) != len(labels):
            raise StatsInputError("`labels` has duplicate entries.")
    if len(labels) == 0:
        raise StatsInputError("`labels` is empty.")
    index = pd.Index(labels)
    codes = index.get_indexer(values)
    if (codes < 0).any():
        # Labels given as strings but values read as numbers (or the reverse): retry on strings.
        str_index = pd.Index([str(x) for x in labels])
        codes2 = str_index.get_indexer(pd.Index(values).astype(str))
        if (codes2 >= 0).all():
            codes = codes2
        else:
            bad = int(np.flatnonzero(codes2 < 0)[0])
            raise StatsInputError(
                f"row {bad + row_offset}: {field_name} {values[bad]!r} is not one of the labels {list(labels)}."
            )
    return codes.astype(np.int64), labels


def annotations_from_records(records, *, labels: Sequence | None = None, item: str = "item_id",
                             annotator: str = "annotator_id", label: str = "label") -> Annotations:
    """Build :class:`Annotations` from long records (item, annotator, label).

    Parameters
    ----------
    records : DataFrame, mapping of columns, or iterable of tuples / dicts
        One annotation per record. Tuples are read as ``(item, annotator, label)``;
        dicts and frames by the column names ``item``, ``annotator``, ``label``.
    labels : sequence, optional
        The ordered label set. Values outside it are an error. Inferred (sorted) when
        omitted.

    Raises
    ------
    StatsInputError
        Empty input, a missing field, an unknown label, or the same (item, annotator)
        twice — the message names the row (0-based) and the field.
    """
    import pandas as pd

    if isinstance(records, pd.DataFrame):
        frame = records
    elif isinstance(records, Mapping):
        frame = pd.DataFrame(records)
    else:
        rows = list(records)
        if rows and isinstance(rows[0], Mapping):
            frame = pd.DataFrame.from_records(rows)
        else:
            for i, r in enumerate(rows):
                if len(r) != 3:
                    raise StatsInputError(f"row {i}: expected (item, annotator, label), got {len(r)} fields.")
            frame = pd.DataFrame.from_records(rows, columns=[item, annotator, label])
    if len(frame) == 0:
        raise StatsInputError("`records` is empty: there are no annotations.")
    for col in (item, annotator, label):
        if col not in frame.columns:
            raise StatsInputError(f"`records` has no field {col!r} (fields: {list(frame.columns)}).")
        missing = frame[col].isna().to_numpy()
        if missing.any():
            raise StatsInputError(f"row {int(np.flatnonzero(missing)[0])}: field {col!r} is missing.")
    label_codes, labels = _label_codes(frame[label].to_numpy(), labels)
    item_codes, item_names = pd.factorize(frame[item], sort=False)
    ann_codes, ann_names = pd.factorize(frame[annotator], sort=False)
    item_codes = item_codes.astype(np.int64)
    ann_codes = ann_codes.astype(np.int64)
    pair = item_codes * len(ann_names) + ann_codes
    order = np.argsort(pair, kind="stable")
    dup = np.flatnonzero(pair[order][1:] == pair[order][:-1])
    if dup.size:
        first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise StatsInputError(
            f"row {second}: annotator {frame[annotator].iloc[second]!r} already labeled item "
            f"{frame[item].iloc[second]!r} at row {first}; keep one label per (item, annotator)."
        )
    return Annotations(item_codes, ann_codes, label_codes, tuple(item_names), tuple(ann_names), labels)


def _is_missing(values: np.ndarray, missing) -> np.ndarray:
    import pandas as pd

    miss = pd.isna(values)
    for m in missing:
        if m is None:
            continue
        with np.errstate(invalid="ignore"):
            eq = values == m
        if isinstance(eq, np.ndarray):
            miss |= eq
    return miss


def annotations_from_wide(matrix, *, labels: Sequence | None = None, missing=(-1, ""),
                          items: Sequence | None = None, annotators: Sequence | None = None) -> Annotations:
    """Build :class:`Annotations` from a wide item × rater matrix with missing entries.

    Parameters
    ----------
    matrix : DataFrame or array-like, shape (N, R)
        Entry ``[n, r]`` is rater ``r``'s label of item ``n`` (a label name, or a class
        index when ``labels`` is omitted and the values are integers). Missing entries
        are NaN/None or any value in ``missing``.
    labels : sequence, optional
        Ordered label set. With integer entries and no ``labels``, the classes are
        ``0..max``.
    items, annotators : sequence, optional
        Names; a DataFrame's index and columns are used by default.
    """
    import pandas as pd

    if isinstance(matrix, pd.DataFrame):
        items = list(matrix.index) if items is None else list(items)
        annotators = list(matrix.columns) if annotators is None else list(annotators)
        values = matrix.to_numpy(dtype=object)
    else:
        values = np.asarray(matrix, dtype=object)
    if values.ndim != 2:
        raise StatsInputError(f"`matrix` must be two-dimensional (items × raters); got shape {values.shape}.")
    if values.size == 0:
        raise StatsInputError("`matrix` is empty.")
    n, r = values.shape
    items = list(range(n)) if items is None else list(items)
    annotators = list(range(r)) if annotators is None else list(annotators)
    if len(items) != n or len(annotators) != r:
        raise StatsInputError("`items`/`annotators` do not match the matrix shape.")
    flat = values.ravel()
    miss = _is_missing(flat, missing)
    if miss.all():
        raise StatsInputError("`matrix` has no labels: every entry is missing.")
    pos = np.flatnonzero(~miss)
    vals = flat[pos]
    if labels is None and all(isinstance(v, int | np.integer | float | np.floating) for v in vals[:1000]):
        nums = vals.astype(float)
        if (nums != np.round(nums)).any() or (nums < 0).any():
            k = int(np.flatnonzero((nums != np.round(nums)) | (nums < 0))[0])
            raise StatsInputError(
                f"row {pos[k] // r}, rater {annotators[pos[k] % r]!r}: {vals[k]!r} is not a class index."
            )
        labels = tuple(range(int(nums.max()) + 1))
        vals = nums.astype(np.int64)
    try:
        codes, labels = _label_codes(vals, labels)
    except StatsInputError as exc:
        msg = str(exc)
        k = int(msg.split(":")[0].split()[1])
        raise StatsInputError(
            f"row {pos[k] // r}, rater {annotators[pos[k] % r]!r}: label {vals[k]!r} is not one of {list(labels or [])}."
        ) from None
    item_codes = (pos // r).astype(np.int64)
    ann_codes = (pos % r).astype(np.int64)
    # Drop items/raters without any label so every name has at least one annotation.
    used_items, item_codes = np.unique(item_codes, return_inverse=True)
    used_anns, ann_codes = np.unique(ann_codes, return_inverse=True)
    return Annotations(
        item_codes.astype(np.int64), ann_codes.astype(np.int64), codes,
        tuple(items[i] for i in used_items), tuple(annotators[a] for a in used_anns), labels,
    )


def counts_from_records(records, *, labels: Sequence | None = None, **fields) -> LabelCounts:
    """Label counts from long records; see :func:`annotations_from_records`."""
    return annotations_from_records(records, labels=labels, **fields).counts()


def counts_from_wide(matrix, *, labels: Sequence | None = None, missing=(-1, ""), **names) -> LabelCounts:
    """Label counts from a wide item × rater matrix; see :func:`annotations_from_wide`."""
    return annotations_from_wide(matrix, labels=labels, missing=missing, **names).counts()


def tally_counts(item: np.ndarray, label: np.ndarray, n_items: int, n_labels: int) -> np.ndarray:
    """The (n_items, n_labels) int64 label counts of (item, label) code pairs: how many
    pairs have each item and label. Codes must lie in ``[0, n_items)`` and ``[0, n_labels)``."""
    item = np.asarray(item, dtype=np.int64)
    flat = np.bincount(item * n_labels + np.asarray(label, dtype=np.int64), minlength=n_items * n_labels)
    return flat.reshape(n_items, n_labels).astype(np.int64, copy=False)


class RowHistogram(NamedTuple):
    """Distinct rows (in lexicographic order), how many rows have each, each row's index.

    ``unique[inverse]`` equals the rows given and ``multiplicity.sum()`` their number.
    """

    unique: np.ndarray
    multiplicity: np.ndarray
    inverse: np.ndarray


#: The largest key space folded into one int64; past it the prefix is re-coded densely.
_KEY_LIMIT = 2**62


def _column_codes(column: np.ndarray, low: int | None, high: int | None) -> tuple[np.ndarray, int]:
    """Order-preserving integer codes of one column and how many codes there can be
    (``low``/``high``: the column's extremes when it holds integers)."""
    if low is not None and low >= 0 and high < max(2 * column.size, 1 << 16):
        return column.astype(np.int64, copy=False), high + 1  # the value is its own code
    values, codes = np.unique(column, return_inverse=True)
    return codes.reshape(-1).astype(np.int64), max(len(values), 1)


def row_histogram(rows) -> RowHistogram:
    """The histogram of the rows of a 2-D array: distinct rows, multiplicities, inverse.

    The same result as ``np.unique(rows, axis=0, return_index=..., return_inverse=True,
    return_counts=True)`` (rows sorted lexicographically, NaN equal to NaN), in time
    about linear in the number of rows: each column becomes order-preserving integer
    codes, the codes are folded into one int64 key per row (first column most
    significant), and only that key is sorted — or counted by ``bincount`` when its range
    is small. The one overflow rule: when the next column would take the key past
    2**62, the key so far is replaced by its dense rank (below the number of rows, so
    the fold always continues), which keeps the order. No row-wise ``unique`` is ever
    needed, however many columns or however large the values.
    """
    arr = np.asarray(rows)
    if arr.ndim != 2:
        raise StatsInputError(f"a row histogram needs a 2-D array; got shape {arr.shape}.")
    n_rows, n_cols = arr.shape
    if n_rows == 0:
        return RowHistogram(arr[:0], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    integer = arr.dtype.kind in "iu" and n_cols > 0
    # Extremes of every column at once: one pass, where column by column would stride.
    lows = arr.min(axis=0).tolist() if integer else [None] * n_cols
    highs = arr.max(axis=0).tolist() if integer else [None] * n_cols
    key = np.zeros(n_rows, dtype=np.int64)
    space = 1
    for j in range(n_cols):
        codes, size = _column_codes(arr[:, j], lows[j], highs[j])
        if space * size > _KEY_LIMIT:
            _, key = np.unique(key, return_inverse=True)
            key = key.reshape(-1).astype(np.int64)
            space = int(key.max()) + 1
        key *= size
        key += codes
        space *= size
    if space <= max(4 * n_rows, 1 << 16):
        hist = np.bincount(key, minlength=space)
        present = hist > 0
        rank = np.cumsum(present) - 1
        inverse = rank[key]
        mult = hist[present]
    else:
        _, inverse, mult = np.unique(key, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
    inverse = inverse.astype(np.int64, copy=False)
    first = np.empty(mult.shape[0], dtype=np.int64)
    first[inverse[::-1]] = np.arange(n_rows - 1, -1, -1)  # the first row of each group
    return RowHistogram(arr[first], mult.astype(np.int64, copy=False), inverse)


def count_histogram(counts) -> RowHistogram:
    """Distinct count vectors, how many items have each, and each item's row.

    Returns ``(unique, multiplicity, inverse)`` with ``unique`` of shape (U, L) in
    lexicographic order, ``multiplicity`` (U,) and ``inverse`` (N,) so that
    ``unique[inverse] == counts``. Statistics that depend on the data only through
    count vectors compute once per row of ``unique`` and weight by ``multiplicity``.
    The counts are checked (:func:`as_count_matrix`); see :func:`row_histogram`.
    """
    return row_histogram(as_count_matrix(counts))


def as_counts(data, *, name: str = "counts") -> np.ndarray:
    """Checked (N, L) label counts from an array-like, a frame, a LabelCounts or an
    Annotations table (whose per-item counts are taken)."""
    if isinstance(data, Annotations):
        return data.counts().counts
    return as_count_matrix(data.counts if isinstance(data, LabelCounts) else data, name=name)
