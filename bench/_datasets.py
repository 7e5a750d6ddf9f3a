"""Where the public multi-annotator datasets live, and the SNLI + BERT reader (bench helper, not a bench).

The benches import it as a sibling module (they run as ``python bench/<name>.py``, which puts
``bench/`` first on the path); the tests import it as ``bench._datasets``, so the tests'
``datasets_dir`` fixture and the benches look in the same places and read SNLI the same way.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NOT_FOUND = "public datasets not found (shared/datasets next to the checkout, or AUDITOR_SHARED_DIR): nothing to do"
SNLI_ORDER = {"entailment": 0, "contradiction": 1, "neutral": 2}


def shared_dir() -> Path | None:
    """The folder holding ``datasets/``: ``AUDITOR_SHARED_DIR``, else ``shared/`` next to or inside the checkout."""
    env = os.environ.get("AUDITOR_SHARED_DIR")
    for base in ([Path(env)] if env else []) + [ROOT.parent / "shared", ROOT / "shared"]:
        if (base / "datasets").is_dir():
            return base
    return None


def datasets_dir() -> Path | None:
    """``shared_dir() / "datasets"``, or None when the public datasets are absent."""
    base = shared_dir()
    return None if base is None else base / "datasets"


def snli_bert(datasets: Path) -> tuple[np.ndarray, np.ndarray]:
    """SNLI's dev set as label counts (entailment, contradiction, neutral) and BERT's predictions.

    The predictions are bert-base-uncased run 0 of Baan et al. (2022), whose ``dev`` and
    ``test`` halves together cover SNLI's dev set; rows come in the predictions' order.
    """
    counts_by_uid = {}
    with gzip.open(datasets / "snli_1.0_full_dev_test" / "snli_1.0_dev.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            c = [0, 0, 0]
            for lab in row["annotator_labels"]:
                if lab in SNLI_ORDER:
                    c[SNLI_ORDER[lab]] += 1
            counts_by_uid[row["pairID"]] = c
    uids, preds = [], []
    folder = datasets / "snli_dev_model_predictions_baan2022"
    for half in ("dev", "test"):
        with open(folder / f"SNLI_{half}_bert-base-uncased_0.json", encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                uids.append(row["uid"])
                preds.append(row["pred"])
    return np.array([counts_by_uid[u] for u in uids]), np.array(preds)
