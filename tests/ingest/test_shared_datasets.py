"""Public datasets imported through the CLI; the snapshot must give back the files' own counts."""

from __future__ import annotations

import csv
import gzip
import json
import uuid
from collections import Counter, defaultdict

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.audit.snapshot import load_snapshot
from auditor.cli import main
from auditor.db import make_session_factory, session_scope
from auditor.ingest import get_dataset

pytestmark = pytest.mark.shared

SNLI_LABELS = ("entailment", "contradiction", "neutral")  # the order of the Baan et al. class indices
BAAN_FILES = ("bert-base-uncased_0", "bert-base-uncased_1", "roberta-base_0", "roberta-base_1", "roberta-base_2")


def _cli(engine, workspace, *args):
    url = engine.url.render_as_string(hide_password=False)
    result = CliRunner().invoke(main, [*args, "--url", url, "--workspace", workspace], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _snapshot(engine, workspace, name, **kw):
    with session_scope(make_session_factory(engine)) as s:
        dataset_id = get_dataset(s, name, workspace=workspace).id
    return load_snapshot(engine, dataset_id, **kw)


def test_snow2008_rte_with_worker_ids_and_gold(datasets_dir, db_engine):
    path = datasets_dir / "snow2008_mturk" / "all_collected_data" / "rte.standardized.tsv"
    ws = f"snow-{uuid.uuid4().hex[:8]}"
    fields = ["--field", "item_id=orig_id", "--field", "annotator_id=!amt_worker_ids"]
    _cli(db_engine, ws, "datasets", "create", "rte", "--labels", "0,1")
    out = _cli(db_engine, ws, "import", "annotations", str(path), "--dataset", "rte", *fields,
               "--field", "label=response", "--vendor", "mturk")
    assert "8000 new annotation(s)" in out and "800 new item(s)" in out and "164 new annotator(s)" in out
    _cli(db_engine, ws, "import", "gold", str(path), "--dataset", "rte", "--field", "item_id=orig_id",
         "--field", "label=gold", "--source", "expert")
    again = _cli(db_engine, ws, "import", "annotations", str(path), "--dataset", "rte", *fields,
                 "--field", "label=response", "--vendor", "mturk")
    assert "duplicate" in again and "nothing changed" in again

    counts: dict[str, Counter] = defaultdict(Counter)
    gold: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for rec in csv.DictReader(fh, delimiter="\t"):
            counts[rec["orig_id"]][rec["response"]] += 1
            gold[rec["orig_id"]] = rec["gold"]
    snap = _snapshot(db_engine, ws, "rte", annotations=True)
    assert snap.n_items == 800 and snap.data_version == 2
    for n, item in enumerate(snap.items):
        assert snap.counts.counts[n].tolist() == [counts[item]["0"], counts[item]["1"]], item
        assert snap.labels[snap.gold[n]] == gold[item]
    np.testing.assert_array_equal(snap.counts.counts, snap.annotations.counts().counts)
    assert snap.vendors() == ("mturk",) and snap.annotations.n_annotators == 164
    # Snow et al. (2008) data: individual-label accuracy against the expert gold is 0.729.
    accuracy = snap.counts.counts[np.arange(snap.n_items), snap.gold].sum() / snap.counts.counts.sum()
    assert accuracy == pytest.approx(0.729, abs=5e-4)


def test_snli_dev_annotations_and_five_model_prediction_files(datasets_dir, db_engine):
    snli = datasets_dir / "snli_1.0_full_dev_test" / "snli_1.0_dev.jsonl.gz"
    baan = datasets_dir / "snli_dev_model_predictions_baan2022"
    ws = f"snli-{uuid.uuid4().hex[:8]}"
    _cli(db_engine, ws, "datasets", "create", "snli-dev", "--labels", ",".join(SNLI_LABELS))
    out = _cli(db_engine, ws, "import", "annotations", str(snli), "--dataset", "snli-dev",
               "--field", "item_id=pairID", "--field", "labels=annotator_labels")
    assert "10000 new item(s)" in out
    for stem in BAAN_FILES:
        model, seed = stem.rsplit("_", 1)
        out = _cli(db_engine, ws, "import", "predictions", str(baan / f"SNLI_dev_{stem}.json"), "--dataset",
                   "snli-dev", "--model", model, "--release", f"seed-{seed}", "--field", "item_id=uid",
                   "--field", "probabilities=probs")
        assert "4921 new prediction(s)" in out and "0 new item(s)" in out

    expected: dict[str, list[int]] = {}
    with gzip.open(snli, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            c = Counter(rec["annotator_labels"])
            expected[rec["pairID"]] = [c[lab] for lab in SNLI_LABELS]
    snap = _snapshot(db_engine, ws, "snli-dev")
    assert snap.n_items == 10000 and snap.data_version == 6
    got = dict(zip(snap.items, snap.counts.counts.tolist(), strict=True))
    assert got == expected
    assert snap.counts.counts.sum() == 49986

    assert len(snap.predictions) == 5
    position = {item: n for n, item in enumerate(snap.items)}
    for stem in BAAN_FILES:
        model, seed = stem.rsplit("_", 1)
        (pred,) = [p for p in snap.predictions.values()
                   if p.release.model == model and p.release.version == f"seed-{seed}"]
        rows = [json.loads(line) for line in open(baan / f"SNLI_dev_{stem}.json", encoding="utf-8")]
        idx = [position[r["uid"]] for r in rows]
        assert pred.has_prediction.sum() == len(rows) == 4921
        np.testing.assert_array_equal(pred.probabilities[idx], np.array([r["probs"] for r in rows]))
        np.testing.assert_array_equal(pred.probabilities[idx].argmax(axis=1), [r["pred"] for r in rows])
