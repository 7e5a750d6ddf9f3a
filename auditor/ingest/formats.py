"""Reading import files row by row, with per-row checks, in bounded memory.

Formats (``format=`` or detected from the name and the first bytes):

``csv`` / ``tsv``
    Long annotations: a header with ``item_id, annotator_id, label`` and optionally
    ``vendor, tier, timestamp``; other columns are ignored. A header without
    ``annotator_id`` is read as ``wide``.
``wide``
    CSV/TSV, first column the item id, every other column one annotator (its header
    is the annotator id); an empty cell is no label.
``jsonl``
    One JSON object per line with the same fields as ``csv``; instead of
    ``annotator_id``/``label``, a ``labels`` list gives anonymous positional raters
    named ``pos1, pos2, ...``.
``label-studio``
    A Label Studio JSON export (a list of tasks): ``annotations`` with
    ``completed_by`` and a ``choices`` result; ``predictions`` with ``model_version``.
    The list is parsed one task at a time (a task may be at most
    :data:`MAX_TASK_BYTES`), so memory does not grow with the export.

Predictions: ``item_id`` and ``label`` (a label name) and/or ``probabilities`` (a
list in the dataset's label order, or an object label → p); in CSV, one column per
label instead. Gold: ``item_id``, ``label`` and optionally ``source``.

Each format is a reader object (:class:`FormatReader`) in the registry :data:`FORMATS`;
``read_annotations``, ``read_predictions`` and ``read_gold`` hand the file to the format's
reader. A new format is one more registered reader.

``field_map`` renames source fields to these names, e.g. ``{"item_id": "pairID"}``.
Files may be gzip-compressed. Rows are numbered from 1, the header not counted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from auditor.ingest.labelstudio import CANCELLED as LS_CANCELLED
from auditor.ingest.labelstudio import GOLD as LS_GOLD
from auditor.ingest.labelstudio import find_choice as find_label_studio_choice
from auditor.ingest.labelstudio import read_annotation as read_label_studio_annotation
from auditor.ingest.sources import (
    MAX_COLUMNS,
    MAX_DECOMPRESSED_BYTES,
    MAX_JSON_DEPTH,
    MAX_LINE_BYTES,
    MAX_TASK_BYTES,
    Source,
    _csv_records,
    _Errors,
    _json_list_items,
    _jsonl_records,
    detect_format,
    open_source,
)
from auditor.timestamps import out_of_range

__all__ = [
    "ANNOTATION_FORMATS",
    "FORMATS",
    "GOLD_FORMATS",
    "MAX_COLUMNS",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_LINE_BYTES",
    "MAX_TASK_BYTES",
    "PREDICTION_FORMATS",
    "FormatReader",
    "LabelStudioReport",
    "LearnedLabels",
    "Source",
    "detect_format",
    "formats_for",
    "open_source",
    "read_annotations",
    "read_gold",
    "read_predictions",
    "register",
]

TIERS = ("crowd", "expert")
PROBABILITY_ATOL = 1e-6


#: Ground-truth annotations one Label Studio export may hold (kept until the votes are staged).
MAX_GROUND_TRUTHS = 200_000


def _renamer(field_map: Mapping[str, str] | None) -> Callable[[str], str]:
    inverse = {src: canonical for canonical, src in (field_map or {}).items()}
    return lambda name: inverse.get(name, name)


def _text(value: Any) -> str | None:
    """A field as text: None/blank → None; JSON numbers keep their literal form."""
    if value.__class__ is str:  # the common case, first
        return value.strip() or None
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    return text or None


#: The longest external id (items, annotators) the database stores.
MAX_ID_LENGTH = 512


def _ident(value: Any, row: int, field: str, errors: _Errors) -> str | None:
    """An id field: a string or an integer, at most :data:`MAX_ID_LENGTH` characters.

    JSON lets a client send ``NaN``, ``1e400``, ``true`` or an object where an id
    belongs; turning those into "nan", "inf" or "{'a': 1}" would store ids nobody
    meant, so they are errors naming the row and field. Returns None (after recording
    why) when the value is not a usable id, and None without an error when missing.
    """
    if value is None or value.__class__ is str:
        text = value.strip() if value is not None else None
    elif isinstance(value, bool) or not isinstance(value, int | float):
        errors.add(row, field, f"must be a string or an integer, not {type(value).__name__}")
        return None
    elif isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            errors.add(row, field, f"must be a string or an integer, not the number {value!r}")
            return None
        text = str(int(value))
    else:
        text = str(value)
    if not text:
        return None
    if len(text) > MAX_ID_LENGTH:
        errors.add(row, field, f"is {len(text)} characters long; ids have at most {MAX_ID_LENGTH}")
        return None
    if "\x00" in text:
        errors.add(row, field, "holds a NUL character")
        return None
    return text


#: The longest vendor name or gold source the database stores.
MAX_NAME_LENGTH = 200


def _name_ok(text: str | None, row: int, field: str, errors: _Errors) -> bool:
    """A vendor name or gold source: at most :data:`MAX_NAME_LENGTH` characters, no NUL."""
    if text is None:
        return True
    if "\x00" in text:
        errors.add(row, field, "holds a NUL character")
        return False
    if len(text) > MAX_NAME_LENGTH:
        errors.add(row, field, f"is {len(text)} characters long; at most {MAX_NAME_LENGTH}")
        return False
    return True


def parse_timestamp(text: str) -> datetime:
    """ISO 8601 → aware datetime (naive values are taken as UTC)."""
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


# --- annotations -------------------------------------------------------------------


@dataclass(frozen=True)
class AnnotationDefaults:
    """Batch-level values for rows that do not carry their own."""

    vendor: str | None = None
    tier: str | None = None


def _annotation_row(row: int, rec: Mapping[str, Any], codes: Mapping[str, int], defaults: AnnotationDefaults,
                    errors: _Errors) -> tuple | None:
    ok = True
    values: dict[str, Any] = {}
    for name in ("item_id", "annotator_id", "label"):
        raw = rec.get(name)
        values[name] = _ident(raw, row, name, errors) if name != "label" else _text(raw)
        if values[name] is None:
            if raw is None or _text(raw) is None:
                errors.add(row, name, "missing")
            ok = False
    label = values["label"]
    code = codes.get(label) if label is not None else None
    if label is not None and code is None:
        errors.add(row, "label", f"{label!r} is not one of the dataset's labels {list(codes)}")
        ok = False
    vendor = _text(rec.get("vendor")) or defaults.vendor
    ok = _name_ok(vendor, row, "vendor", errors) and ok
    tier = _text(rec.get("tier")) or defaults.tier
    if tier is not None and tier not in TIERS:
        errors.add(row, "tier", f"{tier!r} is not one of {list(TIERS)}")
        ok = False
    ts_text = _text(rec.get("timestamp"))
    ts = None
    if ts_text is not None:
        try:
            ts = parse_timestamp(ts_text)
        except ValueError:
            errors.add(row, "timestamp", f"{ts_text!r} is not an ISO 8601 date-time")
            ok = False
        else:
            far = out_of_range(ts)
            if far is not None:
                errors.add(row, "timestamp", far)
                ok = False
    if not ok:
        return None
    return (row, values["item_id"], values["annotator_id"], code, vendor, tier, ts)


class LearnedLabels(dict):
    """Label codes learnt from the file, in order of first appearance: passed as the
    ``labels`` of :func:`read_annotations` by a reader that has no label set (the
    statistics commands), every label is accepted and given the next code."""

    def get(self, label, default=None):
        if label not in self:
            self[label] = len(self)
        return self[label]


def read_annotations(source: Source, fmt: str, labels: Sequence[str] | LearnedLabels, *, field_map: Mapping[str, str] | None = None,
                     defaults: AnnotationDefaults = AnnotationDefaults(),
                     progress: Callable[[int], None] | None = None,
                     report: LabelStudioReport | None = None) -> Iterator[tuple]:
    """Rows ``(row, item_id, annotator_id, label_code, vendor, tier, timestamp)``, read by the
    format's reader (:data:`FORMATS`).

    For a Label Studio export, ``report`` receives its ground-truth annotations (gold,
    not votes) and the counts of cancelled and empty annotations, which are skipped.

    Raises :class:`ImportRejected` (after the read, or as soon as there are
    ``MAX_REPORTED_ERRORS``) when any row is invalid.
    """
    reader = _reader(fmt, "annotations")
    errors = _Errors(source, progress)
    codes = labels if isinstance(labels, LearnedLabels) else {str(lab): i for i, lab in enumerate(labels)}
    yield from reader.annotations(source, errors, codes, field_map=field_map, defaults=defaults, report=report)
    errors.raise_if_any()


@dataclass
class LabelStudioReport:
    """What a Label Studio import read besides votes: ground-truth annotations (gold rows
    ``(row, item_id, label_code, source)``), and how many annotations were skipped as
    cancelled or as submitted with an empty result."""

    gold: list[tuple[int, str, int, str]] = field(default_factory=list)
    cancelled: int = 0
    empty: int = 0


def _label_studio_user(ann: Mapping[str, Any], row: int, errors: _Errors) -> str | None:
    """The annotator of a Label Studio annotation: its user id, whether ``completed_by``
    is the id (the default export) or the user object (an export with user details)."""
    who = ann.get("completed_by")
    if isinstance(who, dict):
        who = who.get("id") if who.get("id") is not None else who.get("email")
    if isinstance(who, bool) or not isinstance(who, int | str):
        errors.add(row, "completed_by", "expected the annotator's user id")
        return None
    return str(who)


def _label_studio_tasks(source: Source, errors: _Errors, field_map: Mapping[str, str] | None
                        ) -> Iterator[tuple[int, dict, str | None]]:
    item_field = (field_map or {}).get("item_id", "item_id")
    for row, task in _json_list_items(source, errors):
        if not isinstance(task, dict):
            errors.add(row, None, "a task must be a JSON object")
            continue
        data = task.get("data") if isinstance(task.get("data"), dict) else {}
        item = _text(data.get(item_field)) or _text(task.get("id"))
        if item is None:
            errors.add(row, item_field, "the task has neither data.item_id nor an id")
            continue
        yield row, task, item


def _label_studio_choice(result: Any, row: int, errors: _Errors) -> str | None:
    """The one choice of a prediction's ``result``, read as an annotation's is."""
    if not isinstance(result, list):
        errors.add(row, "result", f"expected a list of results, not {type(result).__name__}")
        return None
    choice, _, problems = find_label_studio_choice(result)
    for problem in problems:
        errors.add(row, problem.where, problem.reason)
    if choice is None and not problems:
        errors.add(row, "result", "no `choices` result in this annotation")
    return choice


def _task_list(task: Mapping[str, Any], key: str, row: int, errors: _Errors) -> list:
    """A task's ``annotations`` or ``predictions``: a list (absent or null: none)."""
    value = task.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        errors.add(row, key, f"expected a list, not {type(value).__name__}")
        return []
    return value


# --- predictions ------------------------------------------------------------------


def _probabilities(value: Any, labels: Sequence[str], row: int, errors: _Errors) -> list[float] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            errors.add(row, "probabilities", f"{value!r} is not a JSON list of numbers")
            return None
    if isinstance(value, dict):
        missing = [lab for lab in labels if lab not in value]
        if missing:
            errors.add(row, "probabilities", f"no probability for label(s) {missing}")
            return None
        value = [value[lab] for lab in labels]
    if not isinstance(value, list):
        errors.add(row, "probabilities", f"expected a list of {len(labels)} numbers")
        return None
    if len(value) != len(labels):
        errors.add(row, "probabilities", f"expected {len(labels)} probabilities (one per label), found {len(value)}")
        return None
    probs: list[float] = []
    for lab, p in zip(labels, value, strict=True):
        try:
            x = float(p)
        except (TypeError, ValueError):
            errors.add(row, f"probabilities[{lab}]", f"{p!r} is not a number")
            return None
        if math.isnan(x) or math.isinf(x):
            errors.add(row, f"probabilities[{lab}]", f"{p!r} is not a number" if math.isnan(x)
                       else f"{p!r} is not a finite number")
            return None
        if x < 0:
            errors.add(row, f"probabilities[{lab}]", f"{x!r} is negative")
            return None
        probs.append(x)
    total = math.fsum(probs)
    if abs(total - 1.0) > PROBABILITY_ATOL:
        errors.add(row, "probabilities", f"sum to {total!r}, not 1 (tolerance {PROBABILITY_ATOL:g})")
        return None
    return probs


def _prediction_row(row: int, rec: Mapping[str, Any], labels: Sequence[str], codes: Mapping[str, int],
                    errors: _Errors) -> tuple | None:
    item = _ident(rec.get("item_id"), row, "item_id", errors)
    if item is None:
        if _text(rec.get("item_id")) is None:
            errors.add(row, "item_id", "missing")
        return None
    label_text = _text(rec.get("label"))
    code = None
    if label_text is not None:
        code = codes.get(label_text)
        if code is None:
            errors.add(row, "label", f"{label_text!r} is not one of the dataset's labels {list(codes)}")
            return None
    probs = None
    if rec.get("probabilities") is not None:
        probs = _probabilities(rec["probabilities"], labels, row, errors)
        if probs is None:
            return None
    if code is None and probs is None:
        errors.add(row, "label", "a prediction needs a label or probabilities")
        return None
    return (row, item, code, probs)


def read_predictions(source: Source, fmt: str, labels: Sequence[str], *, field_map: Mapping[str, str] | None = None,
                     release: str | None = None, progress: Callable[[int], None] | None = None) -> Iterator[tuple]:
    """Rows ``(row, item_id, label_code or None, probabilities or None)``, read by the format's
    reader (:data:`FORMATS`)."""
    reader = _reader(fmt, "predictions")
    errors = _Errors(source, progress)
    labels = [str(lab) for lab in labels]
    yield from reader.predictions(source, errors, labels, field_map=field_map, release=release)
    errors.raise_if_any()


# --- gold --------------------------------------------------------------------------


def read_gold(source: Source, fmt: str, labels: Sequence[str], *, field_map: Mapping[str, str] | None = None,
              default_source: str | None = None, progress: Callable[[int], None] | None = None) -> Iterator[tuple]:
    """Rows ``(row, item_id, label_code, source)``, read by the format's reader (:data:`FORMATS`)."""
    reader = _reader(fmt, "gold")
    errors = _Errors(source, progress)
    codes = {str(lab): i for i, lab in enumerate(labels)}
    for row, rec in reader.gold_records(source, errors, field_map=field_map):
        item, label = _ident(rec.get("item_id"), row, "item_id", errors), _text(rec.get("label"))
        if item is None:
            if _text(rec.get("item_id")) is None:
                errors.add(row, "item_id", "missing")
            continue
        if label is None:
            errors.add(row, "label", "missing")
            continue
        if label not in codes:
            errors.add(row, "label", f"{label!r} is not one of the dataset's labels {list(codes)}")
            continue
        source_name = _text(rec.get("source")) or default_source
        if not _name_ok(source_name, row, "source", errors):
            continue
        yield (row, item, codes[label], source_name)
    errors.raise_if_any()


# --- the registry of formats ------------------------------------------------------


class FormatReader:
    """One import format: how it reads annotations, predictions and gold labels. A kind
    the format does not hold is not in :attr:`kinds` (its method is never called).

    A new format is a subclass registered with :func:`register`; the use cases, the API
    and the CLI then accept its name."""

    name: str = ""
    kinds: tuple[str, ...] = ()

    def annotations(self, source: Source, errors: _Errors, codes: Mapping[str, int], *,
                    field_map: Mapping[str, str] | None, defaults: AnnotationDefaults,
                    report: LabelStudioReport | None) -> Iterator[tuple]:
        raise NotImplementedError

    def predictions(self, source: Source, errors: _Errors, labels: list[str], *,
                    field_map: Mapping[str, str] | None, release: str | None) -> Iterator[tuple]:
        raise NotImplementedError

    def gold_records(self, source: Source, errors: _Errors, *,
                     field_map: Mapping[str, str] | None) -> Iterable[tuple[int, Mapping[str, Any]]]:
        raise NotImplementedError


#: The import formats by name, in the order they are offered.
FORMATS: dict[str, FormatReader] = {}
_KIND_NAMES = {"annotations": "annotation", "predictions": "prediction", "gold": "gold"}


def register(reader: FormatReader) -> FormatReader:
    """Add ``reader`` to :data:`FORMATS` under its name."""
    FORMATS[reader.name] = reader
    return reader


def formats_for(kind: str) -> tuple[str, ...]:
    """The names of the formats that hold ``kind`` (``annotations``, ``predictions``, ``gold``)."""
    return tuple(name for name, reader in FORMATS.items() if kind in reader.kinds)


def _reader(fmt: str, kind: str) -> FormatReader:
    reader = FORMATS.get(fmt)
    if reader is None or kind not in reader.kinds:
        raise ValueError(f"unknown {_KIND_NAMES[kind]} format {fmt!r}; expected one of {formats_for(kind)}")
    return reader


def _delimiter(source: Source, fmt: str) -> str:
    return "\t" if fmt == "tsv" or source.name.lower().removesuffix(".gz").endswith((".tsv", ".tab")) else ","


class DelimitedReader(FormatReader):
    """``csv``, ``tsv`` (long) and ``wide`` files; a long header without ``annotator_id``
    is read as wide."""

    def __init__(self, name: str, kinds: tuple[str, ...]):
        self.name, self.kinds = name, kinds

    def annotations(self, source, errors, codes, *, field_map, defaults, report):
        rename = _renamer(field_map)
        header, records = _csv_records(source, errors, _delimiter(source, self.name))
        names = [rename(h) for h in header]
        wide = self.name == "wide"
        if not wide and not {"item_id", "annotator_id", "label"} <= set(names):
            if "annotator_id" in names or "label" in names:
                missing = sorted({"item_id", "annotator_id", "label"} - set(names))
                errors.add(0, None, f"the header lacks the column(s) {missing} (columns: {header})")
                errors.raise_if_any()
            wide = True
        if not wide:
            for row, rec in records:
                out = _annotation_row(row, dict(zip(names, rec, strict=True)), codes, defaults, errors)
                if out is not None:
                    yield out
            return
        if len(names) < 2:
            errors.add(0, None, "a wide file needs an item column and at least one annotator column")
            errors.raise_if_any()
        annotators = header[1:]
        for row, rec in records:
            item = _text(rec[0])
            if item is None:
                errors.add(row, header[0], "missing item id")
                continue
            for annotator, cell in zip(annotators, rec[1:], strict=True):
                if _text(cell) is None:
                    continue
                out = _annotation_row(row, {"item_id": item, "annotator_id": annotator, "label": cell},
                                      codes, defaults, errors)
                if out is not None:
                    yield out

    def predictions(self, source, errors, labels, *, field_map, release):
        rename, codes = _renamer(field_map), {lab: i for i, lab in enumerate(labels)}
        header, records = _csv_records(source, errors, _delimiter(source, self.name))
        names = [rename(h) for h in header]
        per_label = all(lab in names for lab in labels)
        if "item_id" not in names or not ("label" in names or "probabilities" in names or per_label):
            errors.add(0, None, f"needs `item_id` and `label` or one probability column per label {labels} "
                                f"(columns: {header})")
            errors.raise_if_any()
        for row, rec in records:
            fields: dict[str, Any] = dict(zip(names, rec, strict=True))
            if per_label and "probabilities" not in fields:
                fields["probabilities"] = {lab: fields[lab] for lab in labels}
            for key in ("label", "probabilities"):
                if fields.get(key) == "":
                    fields[key] = None
            out = _prediction_row(row, fields, labels, codes, errors)
            if out is not None:
                yield out

    def gold_records(self, source, errors, *, field_map):
        rename = _renamer(field_map)
        header, records = _csv_records(source, errors, _delimiter(source, self.name))
        names = [rename(h) for h in header]
        if not {"item_id", "label"} <= set(names):
            errors.add(0, None, f"needs `item_id` and `label` columns (columns: {header})")
            errors.raise_if_any()
        return ((row, dict(zip(names, rec, strict=True))) for row, rec in records)


class JsonLinesReader(FormatReader):
    """``jsonl``: one JSON object per line."""

    name, kinds = "jsonl", ("annotations", "predictions", "gold")

    def annotations(self, source, errors, codes, *, field_map, defaults, report):
        rename = _renamer(field_map)
        for row, raw in _jsonl_records(source, errors):
            rec = {rename(k): v for k, v in raw.items()}
            if "labels" in rec and "annotator_id" not in rec:
                values = rec["labels"]
                if not isinstance(values, list) or not values:
                    errors.add(row, "labels", "expected a non-empty list of labels")
                    continue
                shared = {key: rec.get(key) for key in ("item_id", "vendor", "tier", "timestamp")}
                for k, value in enumerate(values, 1):
                    out = _annotation_row(row, {**shared, "annotator_id": f"pos{k}", "label": value},
                                          codes, defaults, errors)
                    if out is not None:
                        yield out
                continue
            out = _annotation_row(row, rec, codes, defaults, errors)
            if out is not None:
                yield out

    def predictions(self, source, errors, labels, *, field_map, release):
        rename, codes = _renamer(field_map), {lab: i for i, lab in enumerate(labels)}
        for row, raw in _jsonl_records(source, errors):
            fields = {rename(k): v for k, v in raw.items()}
            if "probabilities" not in fields and all(lab in fields for lab in labels):
                # One key per label, as the CSV's one column per label.
                fields["probabilities"] = {lab: fields[lab] for lab in labels}
            out = _prediction_row(row, fields, labels, codes, errors)
            if out is not None:
                yield out

    def gold_records(self, source, errors, *, field_map):
        rename = _renamer(field_map)
        return ((row, {rename(k): v for k, v in raw.items()}) for row, raw in _jsonl_records(source, errors))


class LabelStudioReader(FormatReader):
    """``label-studio``: a Label Studio JSON export, each annotation read as the live
    connector reads it (:mod:`auditor.ingest.labelstudio`)."""

    name, kinds = "label-studio", ("annotations", "predictions")

    def annotations(self, source, errors, codes, *, field_map, defaults, report):
        report = report if report is not None else LabelStudioReport()
        for row, task, item in _label_studio_tasks(source, errors, field_map):
            for ann in _task_list(task, "annotations", row, errors):
                if not isinstance(ann, dict):
                    errors.add(row, "annotations", "an annotation must be a JSON object")
                    continue
                content = read_label_studio_annotation(ann)  # as the live connector reads it
                for problem in content.problems:
                    errors.add(row, problem.where, problem.reason)
                if content.problems:
                    continue
                if content.state == LS_CANCELLED:
                    report.cancelled += 1
                    continue
                if not content.has_result:  # submitted with nothing chosen: no vote, counted
                    report.empty += 1
                    continue
                choice = content.choice
                if choice is None:
                    errors.add(row, "result", "no `choices` result in this annotation")
                    continue
                if content.state == LS_GOLD:
                    # Label Studio's ground truth is the item's gold label, not one more vote.
                    code = codes.get(choice)
                    if code is None:
                        errors.add(row, "choices", f"{choice!r} is not one of the dataset's labels {list(codes)}")
                    elif len(report.gold) >= MAX_GROUND_TRUTHS:
                        errors.add(row, "ground_truth", f"more than {MAX_GROUND_TRUTHS:,} ground-truth annotations "
                                                        "in one export: import the gold labels as a CSV or JSONL file")
                        errors.raise_if_any()
                    else:
                        report.gold.append((row, item, code, "label-studio ground truth"))
                    continue
                out = _annotation_row(row, {"item_id": item, "annotator_id": _label_studio_user(ann, row, errors),
                                            "label": choice, "timestamp": ann.get("created_at")},
                                      codes, defaults, errors)
                if out is not None:
                    yield out

    def predictions(self, source, errors, labels, *, field_map, release):
        codes = {lab: i for i, lab in enumerate(labels)}
        seen_versions: set[str] = set()
        for row, task, item in _label_studio_tasks(source, errors, field_map):
            for pred in _task_list(task, "predictions", row, errors):
                if not isinstance(pred, dict):
                    continue
                version = _text(pred.get("model_version"))
                if len(seen_versions) < 100:  # named in the message when none matches
                    seen_versions.add(str(version)[:100])
                if release is not None and version != release:
                    continue
                choice = _label_studio_choice(pred.get("result"), row, errors)
                if choice is None:
                    continue
                out = _prediction_row(row, {"item_id": item, "label": choice}, labels, codes, errors)
                if out is not None:
                    yield out
        if release is not None and release not in seen_versions:
            errors.add(0, "model_version", f"no prediction has model_version {release!r} "
                                           f"(found {sorted(seen_versions)})")


register(DelimitedReader("csv", ("annotations", "predictions", "gold")))
register(DelimitedReader("tsv", ("annotations", "predictions", "gold")))
register(DelimitedReader("wide", ("annotations", "gold")))
register(JsonLinesReader())
register(LabelStudioReader())

ANNOTATION_FORMATS = formats_for("annotations")
PREDICTION_FORMATS = formats_for("predictions")
GOLD_FORMATS = formats_for("gold")
