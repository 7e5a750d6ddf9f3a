"""Reading annotation and prediction files for the statistics commands.

Long format (CSV, TSV, JSONL or a JSON list of records): ``item_id, annotator_id,
label``. Wide format (CSV/TSV): the first column is the item id, every other column
is one rater. Predictions: ``item_id`` and either ``label`` (a hard prediction) or one
probability column per label.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np
import pandas as pd

from auditor.stats import (
    Annotations,
    StatsInputError,
    annotations_from_records,
    annotations_from_wide,
)

LONG_FIELDS = ("item_id", "annotator_id", "label")


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV/TSV/JSONL/JSON file as a DataFrame of strings (ids are never parsed as numbers)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".gz":
        suffix = Path(path.stem).suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson"):
            return pd.read_json(path, lines=True, dtype=False)
        if suffix == ".json":
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            if not isinstance(data, list):
                raise click.UsageError(f"{path}: a JSON file must hold a list of records.")
            return pd.DataFrame.from_records(data)
        sep = "\t" if suffix in (".tsv", ".tab") else ","
        return pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, na_values=[""])
    except UnicodeDecodeError as exc:
        raise click.UsageError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    except (ValueError, pd.errors.ParserError) as exc:
        raise click.UsageError(f"{path}: cannot be read: {exc}") from None


def read_annotations(path: str | Path, *, labels: list[str] | None = None) -> Annotations:
    """Annotations from a long or wide file (detected from the columns)."""
    frame = read_table(path)
    if frame.empty:
        raise click.UsageError(f"{path}: no rows.")
    try:
        if all(f in frame.columns for f in LONG_FIELDS):
            frame = frame.copy()
            frame["label"] = frame["label"].astype(str)
            return annotations_from_records(frame, labels=labels)
        wide = frame.set_index(frame.columns[0])
        wide = wide.astype(object).where(wide.notna(), None)
        return annotations_from_wide(wide.map(lambda v: None if v is None else str(v)),
                                     labels=labels, missing=("",))
    except StatsInputError as exc:
        raise click.UsageError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class Predictions:
    """Predictions on some of the items of an order: hard class indices or (n, L) probabilities.

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
    """Predictions for ``items`` in the label order ``labels``.

    Without ``partial`` every item must have one. With it (``auditor certify``, the
    service's rule) a model need not predict every item: L rests on the items it
    predicts, the upper bounds on all items; predictions for items the annotations lack
    are counted and ignored, and a file covering none of the items is an error.
    """
    frame = read_table(path)
    if "item_id" not in frame.columns:
        raise click.UsageError(f"{path}: needs an `item_id` column (columns: {list(frame.columns)}).")
    frame = frame.astype({"item_id": str})
    dup = frame["item_id"].duplicated()
    if dup.any():
        row = int(np.flatnonzero(dup.to_numpy())[0])
        raise click.UsageError(f"{path}: row {row + 1}: item_id {frame['item_id'].iloc[row]!r} appears twice.")
    frame = frame.set_index("item_id")
    all_items = [str(i) for i in items]
    positions = np.flatnonzero(pd.Index(all_items).isin(frame.index))
    if not partial and positions.size < len(all_items):
        missing = [i for i in all_items if i not in frame.index]
        raise click.UsageError(f"{path}: no prediction for item {missing[0]!r} ({len(missing)} item(s) missing).")
    if positions.size == 0:
        raise click.UsageError(f"{path}: predicts none of the {len(all_items)} annotated items "
                               f"(first item_id in the file: {frame.index[0]!r}).")
    wanted = [all_items[k] for k in positions]
    n_ignored = int(len(frame) - positions.size)
    frame = frame.loc[wanted]
    str_labels = [str(x) for x in labels]
    if "label" in frame.columns:
        values = frame["label"].astype(str)
        index = pd.Index(str_labels)
        codes = index.get_indexer(values)
        if (codes < 0).any():
            k = int(np.flatnonzero(codes < 0)[0])
            raise click.UsageError(f"{path}: item {wanted[k]!r}: label {values.iloc[k]!r} is not one of {str_labels}.")
        return Predictions(hard=codes.astype(np.int64), probabilities=None, positions=positions, n_ignored=n_ignored)
    if all(lab in frame.columns for lab in str_labels):
        probs = frame[str_labels].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(probs)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise click.UsageError(f"{path}: item {wanted[r]!r}: probability of {str_labels[c]!r} is not a number.")
        sums = probs.sum(axis=1)
        off = (np.abs(sums - 1) > 1e-6) | (probs < 0).any(axis=1)
        if off.any():
            r = int(np.flatnonzero(off)[0])
            raise click.UsageError(f"{path}: item {wanted[r]!r}: probabilities must be ≥ 0 and sum to 1 (sum {sums[r]:.6g}).")
        return Predictions(hard=None, probabilities=probs, positions=positions, n_ignored=n_ignored)
    raise click.UsageError(
        f"{path}: needs a `label` column or one probability column per label {str_labels}."
    )


def read_annotator_groups(path: str | Path, column: str = "vendor") -> dict:
    """``annotator_id → vendor`` from a long annotations file that has that column."""
    frame = read_table(path)
    if column not in frame.columns or "annotator_id" not in frame.columns:
        return {}
    pairs = frame[["annotator_id", column]].dropna().astype(str).drop_duplicates()
    clash = pairs["annotator_id"].duplicated()
    if clash.any():
        who = pairs["annotator_id"][clash].iloc[0]
        raise click.UsageError(f"{path}: annotator {who!r} is listed under more than one {column}.")
    return dict(zip(pairs["annotator_id"], pairs[column], strict=True))


def read_gold(path: str | Path) -> dict:
    """``item_id → label`` from a file with ``item_id`` and ``label`` (or ``gold``) columns."""
    frame = read_table(path)
    col = "label" if "label" in frame.columns else "gold" if "gold" in frame.columns else None
    if "item_id" not in frame.columns or col is None:
        raise click.UsageError(f"{path}: gold labels need `item_id` and `label` columns.")
    frame = frame.dropna(subset=[col]).astype({"item_id": str, col: str})
    return dict(zip(frame["item_id"], frame[col], strict=True))
