"""Reading annotation, prediction and gold files for the statistics commands.

The service's readers (:mod:`auditor.ingest.formats`) do the reading, so ``auditor
certify`` and ``auditor equivalence`` accept exactly the files an import accepts — long
CSV/TSV/JSONL (``item_id, annotator_id, label``), wide CSV/TSV (the first column the
item, one column per annotator), JSONL with a ``labels`` list, Label Studio exports,
predictions as ``label`` and/or probabilities, gzip — and refuse the others with the
same errors naming the row and the field. One difference: an import has its dataset's
label set; here it is the ``--labels`` given, else learnt from the annotations (in
natural order, as :func:`auditor.stats.annotations_from_records` infers it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np
import pandas as pd

from auditor.ingest import formats
from auditor.ingest.errors import ImportRejected, IngestError
from auditor.stats import Annotations, StatsInputError, annotations_from_records

__all__ = ["Predictions", "read_annotations", "read_annotations_and_vendors", "read_gold", "read_predictions"]


def _usage(path: str | Path, exc: Exception) -> click.UsageError:
    if isinstance(exc, ImportRejected):
        lines = "\n".join(f"  {e}" for e in exc.errors)
        more = f" ({exc.bad_rows} bad rows in all; the first are shown)" if exc.bad_rows > len(exc.errors) else ""
        return click.UsageError(f"{path}: cannot be read{more}:\n{lines}")
    return click.UsageError(f"{path}: {exc}")


def _rows(path: str | Path, kind: str, read, *args, **kwargs) -> list[tuple]:
    """Every row a reader of :mod:`auditor.ingest.formats` gives, or a usage error."""
    try:
        source = formats.open_source(path)
        return list(read(source, formats.detect_format(source, kind), *args, **kwargs))
    except (FileNotFoundError, IngestError) as exc:
        raise _usage(path, exc) from None


def _annotation_rows(path: str | Path, labels: Sequence[str] | None) -> tuple[list[tuple], list[str]]:
    """The rows ``(row, item, annotator, code, vendor, tier, timestamp)`` and the label names by code."""
    known = formats.LearnedLabels() if labels is None else [str(x) for x in labels]
    rows = _rows(path, "annotations", formats.read_annotations, known)
    return rows, list(known)


def read_annotations(path: str | Path, *, labels: Sequence[str] | None = None) -> Annotations:
    """Annotations from any annotation file an import accepts (the format detected as an import does)."""
    return read_annotations_and_vendors(path, labels=labels)[0]


def read_annotations_and_vendors(path: str | Path, *, labels: Sequence[str] | None = None
                                 ) -> tuple[Annotations, dict[str, str]]:
    """The annotations and ``annotator_id → vendor`` (for the rows that name one), from one read of the file."""
    rows, names = _annotation_rows(path, labels)
    if not rows:
        raise click.UsageError(f"{path}: holds no annotations.")
    vendors: dict[str, str] = {}
    for row, _item, annotator, _code, vendor, _tier, _ts in rows:
        if vendor is not None and vendors.setdefault(annotator, vendor) != vendor:
            raise click.UsageError(f"{path}: row {row}: annotator {annotator!r} is listed under more than one "
                                   f"vendor ({vendors[annotator]!r} and {vendor!r}).")
    frame = pd.DataFrame([r[:4] for r in rows], columns=["row", "item_id", "annotator_id", "code"])
    del rows
    twice = frame.duplicated(["item_id", "annotator_id"], keep=False)
    if twice.any():
        first = frame[twice].iloc[0]
        again = frame[twice & (frame.item_id == first.item_id) & (frame.annotator_id == first.annotator_id)]
        raise click.UsageError(f"{path}: row {int(again.row.iloc[1])}: annotator {first.annotator_id!r} labels item "
                               f"{first.item_id!r} again (first at row {int(first.row)}).")
    frame["label"] = np.asarray(names, dtype=object)[frame["code"].to_numpy()]
    try:
        return annotations_from_records(frame[["item_id", "annotator_id", "label"]], labels=labels), vendors
    except StatsInputError as exc:
        raise click.UsageError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class Predictions:
    """Predictions on some of the items of an order: hard class indices and/or (n, L) probabilities.

    ``positions`` are the indices (into the item order asked for) of the items predicted,
    in that order; ``n_ignored`` counts predictions for items the annotations do not have.
    """

    hard: np.ndarray | None
    probabilities: np.ndarray | None
    positions: np.ndarray
    n_ignored: int = 0

    @property
    def labels_hard(self) -> np.ndarray:
        """Hard labels (argmax of the probabilities when only those were given)."""
        return self.hard if self.hard is not None else self.probabilities.argmax(axis=1)


def read_predictions(path: str | Path, *, items: tuple, labels: tuple, partial: bool = False) -> Predictions:
    """Predictions for ``items`` in the label order ``labels``, from any prediction file an import accepts.

    Without ``partial`` every item must have one. With it (``auditor certify``, the
    service's rule) a model need not predict every item: L rests on the items it
    predicts, the upper bounds on all items; predictions for items the annotations lack
    are counted and ignored, and a file covering none of the items is an error.
    """
    rows = _rows(path, "predictions", formats.read_predictions, [str(x) for x in labels])
    if not rows:
        raise click.UsageError(f"{path}: holds no predictions.")
    by_item: dict[str, tuple] = {}
    for row, item, code, probs in rows:
        if item in by_item:
            raise click.UsageError(f"{path}: row {row}: item_id {item!r} appears twice "
                                   f"(first at row {by_item[item][0]}).")
        by_item[item] = (row, code, probs)
    all_items = [str(i) for i in items]
    positions = np.array([k for k, i in enumerate(all_items) if i in by_item], dtype=np.int64)
    if not partial and positions.size < len(all_items):
        missing = [i for i in all_items if i not in by_item]
        raise click.UsageError(f"{path}: no prediction for item {missing[0]!r} ({len(missing)} item(s) missing).")
    if positions.size == 0:
        raise click.UsageError(f"{path}: predicts none of the {len(all_items)} annotated items "
                               f"(first item_id in the file: {rows[0][1]!r}).")
    chosen = [by_item[all_items[k]] for k in positions]
    n_ignored = len(by_item) - int(positions.size)
    hard = probabilities = None
    if all(code is not None for _, code, _ in chosen):
        hard = np.array([code for _, code, _ in chosen], dtype=np.int64)
    if all(probs is not None for _, _, probs in chosen):
        probabilities = np.array([probs for _, _, probs in chosen], dtype=float)
    if hard is None and probabilities is None:
        row = next(r for r, code, probs in chosen if code is None)
        raise click.UsageError(f"{path}: row {row}: every prediction needs a label, or every one probabilities "
                               f"(this row lacks the label the others give).")
    return Predictions(hard=hard, probabilities=probabilities, positions=positions, n_ignored=n_ignored)


def read_gold(path: str | Path, labels: Sequence[str]) -> dict:
    """``item_id → label`` from any gold file an import accepts (``item_id, label``)."""
    names = [str(x) for x in labels]
    rows = _rows(path, "gold", formats.read_gold, names)
    return {item: names[code] for _row, item, code, _source in rows}
