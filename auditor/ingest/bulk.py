"""Long CSV/TSV annotation files read, checked and encoded on the client, streamed in blocks.

The bulk path of :func:`auditor.ingest.import_annotations` on PostgreSQL (see there for
when it applies). The file is read once, in blocks, never whole. :func:`stream_long_csv`
parses each block with Arrow's CSV reader and checks every row vectorised (missing
fields, unknown labels, tiers, time stamps; errors name the 1-based data row and the
field, as :mod:`auditor.ingest.formats` does). Each distinct item and annotator gets a
code in order of first appearance across the whole file (:class:`Registry`); the caller
gives the new ones their database ids as they appear, so each block's rows leave at once
as binary ``COPY`` data, built by numpy, while the next block is read. What is kept is
per item (its name, id and label counts) and per annotator, never per row.

Anything this reader cannot settle exactly (a row with the wrong number of columns, a
blank line, bytes that are not UTF-8, a quoted line break, a time stamp format Arrow
does not parse) raises :class:`Fallback`: the caller then imports the file with the
general path, which reports such rows precisely.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from auditor import timestamps
from auditor.ingest.errors import MAX_REPORTED_ERRORS, ImportRejected, RowError
from auditor.ingest.formats import MAX_ID_LENGTH, MAX_NAME_LENGTH, TIERS, AnnotationDefaults, Source

__all__ = ["ANNOTATION_COPY_COLUMNS", "COPY_HEADER", "COPY_TRAILER", "Fallback", "Loaded", "Registry",
           "RowEncoder", "item_copy_text", "stream_long_csv"]

BLOCK_BYTES = 16 << 20
"""CSV bytes parsed at a time (memory per block is a few times this)."""

TS_PATTERN = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$"
_TS_OFFSET = r"(\d{2}:\d{2}(:\d{2}(\.\d+)?)?|^\d{4}-\d{2}-\d{2})(Z|[+-]\d{2}(:?\d{2})?)$"
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01
_NO_TS = np.iinfo(np.int64).min
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8
COPY_TRAILER = b"\xff\xff"
ANNOTATION_COPY_COLUMNS = ("item_id", "annotator_id", "label", "annotated_at")
"""What each row sends; ``dataset_id``, ``batch_id`` and ``data_version``, the same in every
row of a batch, are the new table's column defaults while it is loaded."""


class Fallback(Exception):
    """The bulk reader cannot settle this file exactly; the general path must import it."""


class Registry:
    """Codes for distinct strings in order of first appearance, kept across blocks.

    Lookups go by each string's hash (Python's, in a sorted int64 array), so a block
    costs time in its own distinct values plus one linear merge, however many values
    are known. Every hash match is confirmed by comparing the strings themselves; a
    collision (two strings, one hash) raises :class:`Fallback`, never a wrong code.
    """

    def __init__(self, hasher: Callable[[str], int] = hash) -> None:
        self._hasher = hasher
        self._hashes = np.zeros(0, np.int64)  # sorted
        self._codes = np.zeros(0, np.int64)  # code of each hash above
        self._parts: list[pa.Array] = []
        self.n = 0

    def values(self) -> pa.ChunkedArray:
        """Every known string, in code order."""
        return pa.chunked_array(self._parts, pa.string())

    def add(self, distinct: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Codes of ``distinct`` (strings, each once), and which of them are new (coded last, in order)."""
        hashes = np.empty(len(distinct), np.int64)
        for start in range(0, len(distinct), 1 << 17):  # a few MB of Python strings at a time
            part = distinct.slice(start, 1 << 17).to_pylist()
            hashes[start:start + len(part)] = np.fromiter(map(self._hasher, part), np.int64, len(part))
        order = np.argsort(hashes, kind="stable")
        ordered = hashes[order]
        codes = np.empty(len(distinct), np.int64)
        found = np.zeros(len(distinct), bool)
        hit = np.zeros(len(distinct), bool)  # in hash order
        if len(self._hashes):
            at = np.searchsorted(self._hashes, ordered)
            hit = self._hashes[np.minimum(at, len(self._hashes) - 1)] == ordered
            found[order[hit]] = True
            codes[order[hit]] = self._codes[at[hit]]
        new = ~found
        n_new = int(np.count_nonzero(new))
        codes[new] = self.n + np.arange(n_new)
        if found.any():
            known = self.values().take(pa.array(codes[found]))
            if not pc.all(pc.equal(distinct.filter(pa.array(found)), known)).as_py():
                raise Fallback("two distinct ids with one hash")
        new_hashes = ordered[~hit]  # still sorted
        if len(new_hashes) > 1 and (np.diff(new_hashes) == 0).any():
            raise Fallback("two distinct ids with one hash")
        merged = np.concatenate([self._hashes, new_hashes])
        by_hash = np.argsort(merged, kind="stable")  # two sorted runs: a linear merge
        self._hashes = merged[by_hash]
        self._codes = np.concatenate([self._codes, codes[order[~hit]]])[by_hash]
        if n_new:
            self._parts.append(distinct.filter(pa.array(new)))
        self.n += n_new
        return codes, new


def _rows_dtype(with_ts: bool) -> np.dtype:
    fields = [("n", ">i2"), ("l_item", ">i4"), ("item", ">i8"), ("l_ann", ">i4"), ("ann", ">i4"),
              ("l_label", ">i4"), ("label", ">i2"), ("l_ts", ">i4")]
    return np.dtype([*fields, ("ts", ">i8")] if with_ts else fields)


ROWS_PER_MESSAGE = 1 << 18
"""Annotation rows per ``COPY`` buffer handed to ``send`` (16 MB)."""


class RowEncoder:
    """Binary ``COPY`` rows of ``ANNOTATION_COPY_COLUMNS``.

    Every row has the same bytes but for item, annotator, label and time stamp: each
    buffer starts as copies of a template row (a plain byte broadcast), then only those
    fields are written.
    """

    def __init__(self) -> None:
        self._templates = {}
        for with_ts in (False, True):
            row = np.zeros(1, _rows_dtype(with_ts))
            row["n"] = len(ANNOTATION_COPY_COLUMNS)
            row["l_item"], row["l_ann"], row["l_label"] = 8, 4, 2
            row["l_ts"] = 8 if with_ts else -1  # -1: NULL
            self._templates[with_ts] = np.frombuffer(row.tobytes(), np.uint8)

    def encode(self, items: np.ndarray, annotators: np.ndarray, labels: np.ndarray,
               ts: np.ndarray | None) -> Iterator[memoryview]:
        """The rows, in buffers of up to :data:`ROWS_PER_MESSAGE` (no header or trailer)."""
        parts = [(False, None)] if ts is None else [(True, ts != _NO_TS), (False, ts == _NO_TS)]
        for with_ts, mask in parts:
            it, an, lab, t = items, annotators, labels, ts
            if mask is not None:
                if not mask.any():
                    continue
                it, an, lab = it[mask], an[mask], lab[mask]
                t = ts[mask] if with_ts else None
            dtype = _rows_dtype(with_ts)
            for start in range(0, len(it), ROWS_PER_MESSAGE):
                stop = min(len(it), start + ROWS_PER_MESSAGE)
                raw = np.empty((stop - start, dtype.itemsize), np.uint8)
                raw[:] = self._templates[with_ts]
                rec = raw.view(dtype).reshape(stop - start)
                rec["item"] = it[start:stop]
                rec["ann"] = an[start:stop]
                rec["label"] = lab[start:stop]
                if with_ts:
                    assert t is not None
                    rec["ts"] = t[start:stop] - _PG_EPOCH_US
                yield memoryview(raw).cast("B")


def _copy_text_escape(values: pa.Array) -> pa.Array:
    for old, new in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
        values = pc.replace_substring(values, old, new)
    return values


def item_copy_text(names: pa.ChunkedArray, dataset_id: int, item_ids: np.ndarray, counts: np.ndarray, *,
                   rows_per_block: int = 500_000) -> Iterator[bytes]:
    """Text ``COPY`` data for ``item (id, dataset_id, external_id, label_counts)``."""
    for start in range(0, len(names), rows_per_block):
        stop = min(len(names), start + rows_per_block)
        chunk = names.slice(start, stop - start).combine_chunks()
        columns = [pa.array(counts[start:stop, c]).cast(pa.string()) for c in range(counts.shape[1])]
        vector = pc.binary_join_element_wise("{", pc.binary_join_element_wise(*columns, ","), "}", "")
        lines = pc.binary_join_element_wise(
            pa.array(item_ids[start:stop]).cast(pa.string()), str(int(dataset_id)),
            _copy_text_escape(chunk), vector, "\t")
        lines = pc.binary_join_element_wise(lines, "", "\n")
        offsets = np.frombuffer(lines.buffers()[1], np.int32, len(lines) + 1, lines.offset * 4)
        yield lines.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]]


class _Growing:
    """An array that grows along its first axis, by doubling (amortised linear cost)."""

    def __init__(self, dtype: Any, width: int | None = None) -> None:
        self._shape = () if width is None else (width,)
        self._data = np.zeros((1024, *self._shape), dtype)
        self.n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self._data):
            grown = np.zeros((max(need, 2 * len(self._data)), *self._shape), self._data.dtype)
            grown[:self.n] = self._data[:self.n]
            self._data = grown
        self._data[self.n:need] = values
        self.n = need

    @property
    def array(self) -> np.ndarray:
        return self._data[:self.n]


# --- reading -----------------------------------------------------------------------------


@dataclass
class Loaded:
    """What a streamed file left behind: per item and per annotator, not per row."""

    n_rows: int
    items: pa.ChunkedArray  # distinct item ids, in order of first appearance
    item_ids: np.ndarray  # their database ids
    item_counts: np.ndarray  # (items, labels) label counts
    annotator_rows: list[tuple]  # (id, first row, min vendor, max vendor, min tier, max tier)


def _column(batch: pa.RecordBatch, name: str | None) -> pa.Array | None:
    if name is None:
        return None
    col = batch.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return pc.utf8_trim_whitespace(col)


def _with_default(values: pa.Array | None, n: int, default: str | None) -> pa.Array:
    """Blank → the batch default (or null)."""
    if values is None:
        return pa.nulls(n, pa.string()) if default is None else pa.array([default] * n, pa.string())
    blank = pc.equal(values, "")
    return pc.if_else(blank, pa.scalar(default, pa.string()), values)


def _timestamps(values: pa.Array, present: np.ndarray) -> np.ndarray:
    """Microseconds since 1970 (UTC) where present; naive values are UTC, as in the readers."""
    out = np.full(len(values), _NO_TS, np.int64)
    aware = pc.fill_null(pc.match_substring_regex(values, _TS_OFFSET), False).to_numpy(zero_copy_only=False)
    for mask, target in ((present & aware, pa.timestamp("us", "UTC")), (present & ~aware, pa.timestamp("us"))):
        if not mask.any():
            continue
        try:
            parsed = pc.cast(values.filter(pa.array(mask)), target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise Fallback("time stamps in a form the bulk reader does not parse") from None
        out[mask] = parsed.cast(pa.int64()).to_numpy()
    return out


def _out_of_range(ts: np.ndarray) -> np.ndarray:
    """Rows whose time stamp (microseconds; :data:`_NO_TS` when absent) is outside the accepted range."""
    lo, hi = timestamps.bounds_us()
    return (ts != _NO_TS) & ((ts < lo) | (ts > hi))


def _blocks(source: Source, delimiter: str, n_columns: int, used: Sequence[str],
            progress: Callable[[int], None] | None) -> Iterator[pa.RecordBatch]:
    names = [f"c{i}" for i in range(n_columns)]
    invalid: list[Any] = []

    def on_invalid(row: Any) -> str:
        invalid.append(row)
        return "skip"

    read = pacsv.ReadOptions(column_names=names, skip_rows=1, block_size=BLOCK_BYTES, use_threads=True)
    parse = pacsv.ParseOptions(delimiter=delimiter, ignore_empty_lines=False, newlines_in_values=False,
                               invalid_row_handler=on_invalid)
    convert = pacsv.ConvertOptions(include_columns=list(used), column_types=dict.fromkeys(used, pa.string()),
                                   strings_can_be_null=False, quoted_strings_can_be_null=False)
    with source.open() as fh:
        try:
            reader = pacsv.open_csv(fh, read_options=read, parse_options=parse, convert_options=convert)
            done = 0
            for batch in reader:
                if invalid:
                    raise Fallback("a row the bulk reader cannot place")
                if progress is not None:
                    position = fh.tell() if hasattr(fh, "tell") else 0
                    if position > done:
                        progress(position - done)
                        done = position
                yield batch
        except pa.ArrowException as exc:
            raise Fallback(str(exc)) from None
    if invalid:
        raise Fallback("a row the bulk reader cannot place")


@dataclass
class _Checked:
    """One block's columns and, per row, what is wrong with it (each mask one check)."""

    item: pa.Array
    annotator: pa.Array
    label: pa.Array
    code: np.ndarray
    tier: pa.Array
    vendor: pa.Array
    ts_text: pa.Array | None
    ts: np.ndarray | None
    miss_item: np.ndarray
    miss_ann: np.ndarray
    miss_label: np.ndarray
    unknown: np.ndarray
    bad_tier: np.ndarray
    bad_ts: np.ndarray
    far: np.ndarray
    long_item: np.ndarray
    long_ann: np.ndarray
    long_vendor: np.ndarray

    def bad(self) -> np.ndarray:
        return (self.miss_item | self.miss_ann | self.miss_label | self.unknown | self.bad_tier | self.bad_ts
                | self.far | self.long_item | self.long_ann | self.long_vendor)

    def row_errors(self, i: int, row: int, label_names: list[str]) -> list[RowError]:
        """The errors of the block's row ``i`` (row ``row`` of the file), as the readers word them."""
        errors = []
        for mask, name in ((self.miss_item, "item_id"), (self.miss_ann, "annotator_id"), (self.miss_label, "label")):
            if mask[i]:
                errors.append(RowError(row, name, "missing"))
        for mask, name, values in ((self.long_item, "item_id", self.item),
                                   (self.long_ann, "annotator_id", self.annotator)):
            if mask[i]:
                errors.append(RowError(row, name, f"is {len(values[i].as_py())} characters long; ids "
                                                  f"have at most {MAX_ID_LENGTH}"))
        if self.long_vendor[i]:
            errors.append(RowError(row, "vendor", f"is {len(self.vendor[i].as_py())} characters long; at "
                                                  f"most {MAX_NAME_LENGTH}"))
        if self.unknown[i]:
            errors.append(RowError(row, "label", f"{self.label[i].as_py()!r} is not one of the dataset's "
                                                 f"labels {label_names}"))
        if self.bad_tier[i]:
            errors.append(RowError(row, "tier", f"{self.tier[i].as_py()!r} is not one of {list(TIERS)}"))
        if self.bad_ts[i]:
            errors.append(RowError(row, "timestamp", f"{self.ts_text[i].as_py()!r} is not an ISO 8601 date-time"))
        if self.far[i]:
            errors.append(RowError(row, "timestamp", timestamps.refusal(repr(self.ts_text[i].as_py()))))
        return errors


def _check_block(batch: pa.RecordBatch, col: dict[str, str], n: int, label_set: pa.Array,
                 defaults: AnnotationDefaults) -> _Checked:
    """Every check the row readers make, on one block at once (raises :class:`Fallback` on a
    blank row, which the readers decide)."""
    item, annotator, label = (_column(batch, col[k]) for k in ("item_id", "annotator_id", "label"))
    assert item is not None and annotator is not None and label is not None
    miss_item = pc.binary_length(item).to_numpy() == 0
    miss_ann = pc.binary_length(annotator).to_numpy() == 0
    miss_label = pc.binary_length(label).to_numpy() == 0
    if (miss_item & miss_ann & miss_label).any():
        # A blank line (skipped by the readers) or a row of empty fields: let them decide.
        raise Fallback("a blank row")
    code = pc.fill_null(pc.index_in(label, value_set=label_set), -1).to_numpy()
    tier = _with_default(_column(batch, col.get("tier")), n, defaults.tier)
    bad_tier = ~(pc.is_in(tier, value_set=pa.array(TIERS)).to_numpy(zero_copy_only=False)
                 | pc.is_null(tier).to_numpy(zero_copy_only=False))
    vendor = _with_default(_column(batch, col.get("vendor")), n, defaults.vendor)
    ts_text = _column(batch, col.get("timestamp"))
    bad_ts = np.zeros(n, bool)
    present = np.zeros(n, bool)
    if ts_text is not None:
        present = pc.binary_length(ts_text).to_numpy() > 0
        bad_ts = present & ~pc.fill_null(pc.match_substring_regex(ts_text, TS_PATTERN), False).to_numpy(
            zero_copy_only=False)
    ts = _timestamps(ts_text, present & ~bad_ts) if ts_text is not None else None
    return _Checked(
        item=item, annotator=annotator, label=label, code=code, tier=tier, vendor=vendor, ts_text=ts_text, ts=ts,
        miss_item=miss_item, miss_ann=miss_ann, miss_label=miss_label, unknown=(code < 0) & ~miss_label,
        bad_tier=bad_tier, bad_ts=bad_ts, far=np.zeros(n, bool) if ts is None else _out_of_range(ts),
        long_item=pc.fill_null(pc.utf8_length(item), 0).to_numpy() > MAX_ID_LENGTH,
        long_ann=pc.fill_null(pc.utf8_length(annotator), 0).to_numpy() > MAX_ID_LENGTH,
        long_vendor=pc.fill_null(pc.utf8_length(vendor), 0).to_numpy() > MAX_NAME_LENGTH,
    )


def _annotator_rows(aggregates: list[pa.Table], annotators: Registry) -> list[tuple]:
    """Per annotator of the file: name, first row, and the smallest and largest vendor and tier given."""
    per_annotator = pa.concat_tables(aggregates).group_by("a").aggregate([
        ("r_min", "min"), ("v_min", "min"), ("v_max", "max"), ("t_min", "min"), ("t_max", "max")]
    ).sort_by("a")
    names = annotators.values().take(per_annotator.column("a")).to_pylist()
    return list(zip(names, *(per_annotator.column(c).to_pylist() for c in
                             ("r_min_min", "v_min_min", "v_max_max", "t_min_min", "t_max_max")),
                    strict=True))


def stream_long_csv(source: Source, *, delimiter: str, columns: dict[str, int], n_columns: int,
                    labels: Sequence[str], defaults: AnnotationDefaults,
                    new_item_ids: Callable[[pa.Array], np.ndarray],
                    new_annotator_ids: Callable[[list[str]], np.ndarray],
                    send: Callable[[memoryview], None],
                    progress: Callable[[int], None] | None = None) -> Loaded:
    """Read, check and send a long CSV/TSV (``columns``: canonical name → column index).

    ``new_item_ids(names)`` and ``new_annotator_ids(names)`` give database ids to the items
    and annotators as they first appear; ``send`` takes each block's binary ``COPY``
    rows (the caller writes :data:`COPY_HEADER` and :data:`COPY_TRAILER`). Once a row
    fails a check nothing more is sent: the rest of the file is read only to name more
    bad rows, then :class:`ImportRejected` is raised. Raises :class:`Fallback` as well.
    """
    col = {name: f"c{i}" for name, i in columns.items()}
    used = sorted(set(col.values()))
    label_set = pa.array([str(lab) for lab in labels], pa.string())
    label_names = [str(lab) for lab in labels]
    L = len(labels)
    items, annotators = Registry(), Registry()
    encoder = RowEncoder()
    item_ids, annotator_ids = _Growing(np.int64), _Growing(np.int64)
    counts = _Growing(np.int64, L)
    aggregates: list[pa.Table] = []
    errors: list[RowError] = []
    bad_rows = 0
    rows = 0
    for batch in _blocks(source, delimiter, n_columns, used, progress):
        n = batch.num_rows
        if n == 0:
            continue
        c = _check_block(batch, col, n, label_set, defaults)
        item, annotator, code, vendor, tier, ts = c.item, c.annotator, c.code, c.vendor, c.tier, c.ts
        bad = c.bad()
        if bad.any():
            bad_rows += int(np.count_nonzero(bad))
            for i in np.flatnonzero(bad)[:max(MAX_REPORTED_ERRORS - len(errors), 0)]:
                errors += c.row_errors(int(i), rows + int(i) + 1, label_names)
        if errors:
            rows += n
            continue  # keep reading only to find more errors

        item_enc = pc.dictionary_encode(item)
        item_codes, new = items.add(item_enc.dictionary)
        n_new = int(np.count_nonzero(new))
        if n_new:
            item_ids.extend(np.asarray(new_item_ids(item_enc.dictionary.filter(pa.array(new))), np.int64))
            counts.extend(np.zeros((n_new, L), np.int64))
        local_items = item_enc.indices.to_numpy()
        counts.array[item_codes] += np.bincount(local_items.astype(np.int64) * L + code,
                                          minlength=len(item_codes) * L).reshape(-1, L)

        ann_enc = pc.dictionary_encode(annotator)
        ann_codes, new = annotators.add(ann_enc.dictionary)
        if new.any():
            annotator_ids.extend(np.asarray(new_annotator_ids(ann_enc.dictionary.filter(pa.array(new))
                                                              .to_pylist()), np.int64))
        local_annotators = ann_enc.indices.to_numpy()
        row_numbers = pa.array(np.arange(rows + 1, rows + n + 1, dtype=np.int64))
        aggregates.append(pa.table({"a": pa.array(ann_codes[local_annotators]), "r": row_numbers, "v": vendor,
                                    "t": tier}).group_by("a").aggregate([("r", "min"), ("v", "min"),
                                                                         ("v", "max"), ("t", "min"), ("t", "max")]))
        for message in encoder.encode(item_ids.array[item_codes][local_items],
                                      annotator_ids.array[ann_codes][local_annotators], code, ts):
            send(message)
        rows += n
    if errors:
        raise ImportRejected(errors, source=source.name, bad_rows=bad_rows)
    if rows == 0:
        raise ImportRejected([RowError(0, None, "the file holds no annotations")], source=source.name)
    annotator_rows = _annotator_rows(aggregates, annotators)
    return Loaded(n_rows=rows, items=items.values(), item_ids=item_ids.array, item_counts=counts.array,
                  annotator_rows=annotator_rows)
