"""Run the reference package ``surveyequivalence`` on one rating matrix (bench helper).

Runs under the reference's own interpreter (it pins old numpy/pandas), never under
Auditor's. Prints one JSON object: wall time, the power curve on the actual items and
its bootstrap replicates, the classifier scores and equivalences.

    <reference-python> bench/_se_reference.py RATINGS.csv PREDICTIONS.csv \
        --combiner abc --scorer cross_entropy --bootstrap 500 --seed 0
"""

import argparse
import json
import random
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ratings")
    parser.add_argument("predictions")
    parser.add_argument("--combiner", choices=["plurality", "frequency", "abc"], required=True)
    parser.add_argument("--scorer", choices=["agreement", "cross_entropy"], required=True)
    parser.add_argument("--bootstrap", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--labels", nargs="+", default=None,
                        help="label order of the probability vectors (default: sorted)")
    parser.add_argument("--columns", nargs="*", default=None,
                        help="prediction columns to score (default: all)")
    args = parser.parse_args()

    import numpy as np
    import pandas as pd
    import surveyequivalence as se

    random.seed(args.seed)
    np.random.seed(args.seed)  # noqa: NPY002 - the reference draws from numpy's global generator

    W = pd.read_csv(args.ratings, index_col=0, dtype=str)
    W = W.astype(object).where(W.notna(), None)
    labels = args.labels or sorted({v for v in W.to_numpy().ravel() if v is not None})
    raw = pd.read_csv(args.predictions, index_col=0, dtype=str)
    if args.columns:
        raw = raw[args.columns]

    def to_prediction(s):
        body = s.split(": ", 1)[1]
        if body.startswith("["):
            return se.DiscreteDistributionPrediction(labels, [float(x) for x in body[1:-1].split(",")])
        return se.DiscretePrediction(body)

    preds = raw.map(to_prediction) if hasattr(raw, "map") else raw.applymap(to_prediction)
    combiner = {
        "plurality": lambda: se.PluralityVote(allowable_labels=labels),
        "frequency": lambda: se.FrequencyCombiner(allowable_labels=labels),
        "abc": lambda: se.AnonymousBayesianCombiner(allowable_labels=labels, W=W),
    }[args.combiner]()
    scorer = {"agreement": se.AgreementScore, "cross_entropy": se.CrossEntropyScore}[args.scorer]()

    start = time.perf_counter()
    pipeline = se.AnalysisPipeline(
        W, expert_cols=list(W.columns), classifier_predictions=preds, combiner=combiner,
        scorer=scorer, allowable_labels=labels, num_bootstrap_item_samples=args.bootstrap,
        max_K=W.shape[1], anonymous_raters=True, verbosity=0, procs=1,
    )
    elapsed = time.perf_counter() - start
    curve = pipeline.expert_power_curve.df
    out = {
        "seconds": elapsed,
        "labels": labels,
        "n_bootstrap": args.bootstrap,
        "k": [int(c) for c in curve.columns],
        "curve_actual": [float(x) for x in curve.iloc[0]],
        "curve_replicates": curve.iloc[1:].astype(float).values.tolist(),
        "classifier_actual": {c: float(v) for c, v in pipeline.classifier_scores.df.iloc[0].items()},
        "equivalence_actual": {c: float(v) for c, v in pipeline.expert_survey_equivalences.df.iloc[0].items()},
        "equivalence_replicates": {c: [float(x) for x in pipeline.expert_survey_equivalences.df[c].iloc[1:]]
                                   for c in pipeline.expert_survey_equivalences.df.columns},
    }
    print(json.dumps(out))


if __name__ == "__main__":  # the reference forces the spawn start method
    main()
