"""Long CSV/TSV annotation files read, checked and encoded on the client, in bounded memory.

The bulk path of :func:`auditor.ingest.import_annotations` on PostgreSQL (see there for
when it applies). The file is read twice, in blocks, never whole:

1. :func:`scan_long_csv` parses each block with Arrow's CSV reader, checks every row
   vectorised (missing fields, unknown labels, tiers, time stamps; errors name the
   1-based data row and the field, as :mod:`auditor.ingest.formats` does), gives each
   distinct item and annotator a code in order of first appearance, counts labels per
   item and aggregates vendor/tier per annotator. The per-row (block-local) codes go to
   a temporary spill file (9 or 17 bytes a row), so memory grows with the distinct
   items of each block, not with the rows.
2. :meth:`Scan.annotation_copy_blocks` reads the spill back and packs the stored rows,
   with the database ids, as binary ``COPY`` data, built by numpy a block at a time.

Anything this reader cannot settle exactly (a row with the wrong number of columns, a
blank line, bytes that are not UTF-8, a quoted line break, a time stamp format Arrow
does not parse) raises :class:`Fallback`: the caller then imports the file with the
general path, which reports such rows precisely.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from auditor.ingest.errors import MAX_REPORTED_ERRORS, ImportRejected, RowError
from auditor.ingest.formats import TIERS, AnnotationDefaults, Source

__all__ = ["Fallback", "Scan", "annotation_copy_blocks", "item_copy_text", "scan_long_csv"]

BLOCK_BYTES = 32 << 20
"""CSV bytes parsed at a time (memory per block is a few times this)."""

TS_PATTERN = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$"
_TS_OFFSET = r"(\d{2}:\d{2}(:\d{2}(\.\d+)?)?|^\d{4}-\d{2}-\d{2})(Z|[+-]\d{2}(:?\d{2})?)$"
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970-01-01
_NO_TS = np.iinfo(np.int64).min
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8
COPY_TRAILER = b"\xff\xff"


class Fallback(Exception):
    """The bulk reader cannot settle this file exactly; the general path must import it."""


@dataclass
class Scan:
    """What the first pass learnt: counts, distinct ids, per-annotator facts, the spill file."""

    n_rows: int
    labels: int
    items: pa.StringArray  # distinct item ids, in order of first appearance
    item_counts: np.ndarray  # (items, labels) label counts
    annotators: pa.StringArray  # distinct annotator ids, in order of first appearance
    annotator_rows: list[tuple]  # (id, first row, min vendor, max vendor, min tier, max tier)
    has_ts: bool
    spill: IO[bytes]
    blocks: list[int] = field(default_factory=list)
    item_maps: list[np.ndarray] = field(default_factory=list)  # per block: local code → global code
    annotator_maps: list[np.ndarray] = field(default_factory=list)

    def close(self) -> None:
        self.spill.close()

    def __enter__(self) -> Scan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spilled(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]:
        self.spill.seek(0)
        for n in self.blocks:
            items = np.fromfile(self.spill, np.int32, n)
            annotators = np.fromfile(self.spill, np.int32, n)
            labels = np.fromfile(self.spill, np.int8, n)
            ts = np.fromfile(self.spill, np.int64, n) if self.has_ts else None
            yield items, annotators, labels, ts


def _rows_dtype(with_ts: bool) -> np.dtype:
    fields: list[tuple[str, str]] = [
        ("n", ">i2"), ("l_ds", ">i4"), ("ds", ">i4"), ("l_item", ">i4"), ("item", ">i8"),
        ("l_ann", ">i4"), ("ann", ">i4"), ("l_label", ">i4"), ("label", ">i2"), ("l_ts", ">i4")]
    if with_ts:
        fields.append(("ts", ">i8"))
    fields += [("l_batch", ">i4"), ("batch", ">i8"), ("l_version", ">i4"), ("version", ">i8")]
    return np.dtype(fields)


ANNOTATION_COPY_COLUMNS = ("dataset_id", "item_id", "annotator_id", "label", "annotated_at", "batch_id",
                           "data_version")


def annotation_copy_blocks(scan: Scan, dataset_id: int, item_ids: np.ndarray, annotator_ids: np.ndarray,
                           batch_id: int, data_version: int) -> Iterator[bytes]:
    """Binary ``COPY`` data for ``ANNOTATION_COPY_COLUMNS`` (header, blocks of rows, trailer)."""
    yield COPY_HEADER
    for k, (local_items, local_annotators, labels, ts) in enumerate(scan._spilled()):
        items = item_ids[scan.item_maps[k]][local_items]
        annotators = annotator_ids[scan.annotator_maps[k]][local_annotators]
        parts = [(None, slice(None))] if ts is None else [(True, ts != _NO_TS), (False, ts == _NO_TS)]
        for with_ts, mask in parts:
            n = len(items) if with_ts is None else int(np.count_nonzero(mask))
            if n == 0:
                continue
            rec = np.empty(n, _rows_dtype(bool(with_ts)))
            rec["n"] = len(ANNOTATION_COPY_COLUMNS)
            rec["l_ds"], rec["ds"] = 4, dataset_id
            rec["l_item"], rec["item"] = 8, items[mask]
            rec["l_ann"], rec["ann"] = 4, annotators[mask]
            rec["l_label"], rec["label"] = 2, labels[mask]
            if with_ts:
                rec["l_ts"], rec["ts"] = 8, ts[mask] - _PG_EPOCH_US
            else:
                rec["l_ts"] = -1  # NULL
            rec["l_batch"], rec["batch"] = 8, batch_id
            rec["l_version"], rec["version"] = 8, data_version
            yield rec.tobytes()
    yield COPY_TRAILER


def _copy_text_escape(values: pa.Array) -> pa.Array:
    for old, new in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
        values = pc.replace_substring(values, old, new)
    return values


def item_copy_text(scan: Scan, dataset_id: int, item_ids: np.ndarray, *, rows_per_block: int = 500_000
                   ) -> Iterator[bytes]:
    """Text ``COPY`` data for ``item (id, dataset_id, external_id, label_counts)``."""
    for start in range(0, len(scan.items), rows_per_block):
        stop = min(len(scan.items), start + rows_per_block)
        counts = [pa.array(scan.item_counts[start:stop, c]).cast(pa.string()) for c in range(scan.labels)]
        vector = pc.binary_join_element_wise("{", pc.binary_join_element_wise(*counts, ","), "}", "")
        lines = pc.binary_join_element_wise(
            pa.array(item_ids[start:stop]).cast(pa.string()), str(int(dataset_id)),
            _copy_text_escape(scan.items[start:stop]), vector, "\t")
        lines = pc.binary_join_element_wise(lines, "", "\n")
        offsets = np.frombuffer(lines.buffers()[1], np.int32, len(lines) + 1, lines.offset * 4)
        yield lines.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]]


# --- the first pass --------------------------------------------------------------------


class _Codes:
    """Codes for distinct strings in order of first appearance, across blocks.

    Each block is encoded on its own (block-local codes, spilled as they are); the
    blocks' distinct values are encoded together once at the end, which maps each
    block's local codes to global ones.
    """

    def __init__(self) -> None:
        self.parts: list[pa.Array] = []
        self.known: pa.Array = pa.array([], pa.string())
        self.maps: list[np.ndarray] = []

    def encode(self, values: pa.Array) -> np.ndarray:
        enc = pc.dictionary_encode(values)
        self.parts.append(enc.dictionary)
        return enc.indices.to_numpy().astype(np.int32)

    def finish(self) -> None:
        enc = pc.dictionary_encode(pa.concat_arrays(self.parts) if self.parts else pa.array([], pa.string()))
        self.known = enc.dictionary
        codes = enc.indices.to_numpy().astype(np.int64)
        bounds = np.cumsum([0, *(len(p) for p in self.parts)])
        self.maps = [codes[a:b] for a, b in itertools.pairwise(bounds)]
        self.parts = []


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


def scan_long_csv(source: Source, *, delimiter: str, columns: dict[str, int], n_columns: int,
                  labels: Sequence[str], defaults: AnnotationDefaults,
                  progress: Callable[[int], None] | None = None) -> Scan:
    """First pass over a long CSV/TSV (``columns``: canonical name → column index).

    Raises :class:`ImportRejected` naming rows and fields, or :class:`Fallback`.
    """
    col = {name: f"c{i}" for name, i in columns.items()}
    used = sorted(set(col.values()))
    label_set = pa.array([str(lab) for lab in labels], pa.string())
    label_names = [str(lab) for lab in labels]
    L = len(labels)
    items, annotators = _Codes(), _Codes()
    block_counts: list[np.ndarray] = []
    aggregates: list[pa.Table] = []
    errors: list[RowError] = []
    has_ts = "timestamp" in col
    spill = tempfile.TemporaryFile()
    blocks: list[int] = []
    rows = 0
    try:
        for batch in _blocks(source, delimiter, n_columns, used, progress):
            n = batch.num_rows
            if n == 0:
                continue
            item, annotator, label = (_column(batch, col[k]) for k in ("item_id", "annotator_id", "label"))
            assert item is not None and annotator is not None and label is not None
            miss_item = pc.binary_length(item).to_numpy() == 0
            miss_ann = pc.binary_length(annotator).to_numpy() == 0
            miss_label = pc.binary_length(label).to_numpy() == 0
            if (miss_item & miss_ann & miss_label).any():
                # A blank line (skipped by the readers) or a row of empty fields: let them decide.
                raise Fallback("a blank row")
            code = pc.fill_null(pc.index_in(label, value_set=label_set), -1).to_numpy()
            unknown = (code < 0) & ~miss_label
            tier = _with_default(_column(batch, col.get("tier")), n, defaults.tier)
            bad_tier = ~(pc.is_in(tier, value_set=pa.array(TIERS)).to_numpy(zero_copy_only=False)
                         | pc.is_null(tier).to_numpy(zero_copy_only=False))
            vendor = _with_default(_column(batch, col.get("vendor")), n, defaults.vendor)
            ts_text = _column(batch, col.get("timestamp"))
            bad_ts = np.zeros(n, bool)
            if ts_text is not None:
                present = pc.binary_length(ts_text).to_numpy() > 0
                bad_ts = present & ~pc.fill_null(pc.match_substring_regex(ts_text, TS_PATTERN), False).to_numpy(
                    zero_copy_only=False)
            bad = miss_item | miss_ann | miss_label | unknown | bad_tier | bad_ts
            if bad.any():
                for i in np.flatnonzero(bad)[:MAX_REPORTED_ERRORS]:
                    row = rows + int(i) + 1
                    for mask, name in ((miss_item, "item_id"), (miss_ann, "annotator_id"), (miss_label, "label")):
                        if mask[i]:
                            errors.append(RowError(row, name, "missing"))
                    if unknown[i]:
                        errors.append(RowError(row, "label", f"{label[i].as_py()!r} is not one of the dataset's "
                                                             f"labels {label_names}"))
                    if bad_tier[i]:
                        errors.append(RowError(row, "tier", f"{tier[i].as_py()!r} is not one of {list(TIERS)}"))
                    if bad_ts[i]:
                        errors.append(RowError(row, "timestamp",
                                               f"{ts_text[i].as_py()!r} is not an ISO 8601 date-time"))
                if len(errors) >= MAX_REPORTED_ERRORS:
                    break
            if errors:
                rows += n
                continue  # keep reading only to find more errors
            ts = _timestamps(ts_text, present) if ts_text is not None else None
            item_codes = items.encode(item)
            ann_codes = annotators.encode(annotator)
            block_counts.append(np.bincount(item_codes.astype(np.int64) * L + code,
                                            minlength=len(items.parts[-1]) * L).reshape(-1, L))
            row_numbers = pa.array(np.arange(rows + 1, rows + n + 1, dtype=np.int64))
            aggregates.append(pa.table({"a": pa.array(ann_codes), "r": row_numbers, "v": vendor, "t": tier})
                              .group_by("a").aggregate([("r", "min"), ("v", "min"), ("v", "max"),
                                                        ("t", "min"), ("t", "max")]))
            spill.write(item_codes.tobytes())
            spill.write(ann_codes.tobytes())
            spill.write(code.astype(np.int8).tobytes())
            if ts is not None:
                spill.write(ts.tobytes())
            blocks.append(n)
            rows += n
        if errors:
            raise ImportRejected(errors, source=source.name)
        if rows == 0:
            raise ImportRejected([RowError(0, None, "the file holds no annotations")], source=source.name)
        items.finish()
        annotators.finish()
        counts = np.zeros((len(items.known), L), np.int64)
        for mapping, local in zip(items.maps, block_counts, strict=True):
            counts[mapping] += local  # a block's distinct items are distinct globally too
        aggregates = [agg.set_column(0, "a", pa.array(mapping[agg.column("a").to_numpy()]))
                      for mapping, agg in zip(annotators.maps, aggregates, strict=True)]
        per_annotator = pa.concat_tables(aggregates).group_by("a").aggregate([
            ("r_min", "min"), ("v_min", "min"), ("v_max", "max"), ("t_min", "min"), ("t_max", "max")]
        ).sort_by("a")
        names = annotators.known.take(per_annotator.column("a")).to_pylist()
        annotator_rows = list(zip(names, *(per_annotator.column(c).to_pylist() for c in
                                           ("r_min_min", "v_min_min", "v_max_max", "t_min_min", "t_max_max")),
                                  strict=True))
        spill.flush()
        return Scan(n_rows=rows, labels=L, items=items.known, item_counts=counts, annotators=annotators.known,
                    annotator_rows=annotator_rows, has_ts=has_ts, spill=spill, blocks=blocks,
                    item_maps=items.maps, annotator_maps=annotators.maps)
    except BaseException:
        spill.close()
        raise
