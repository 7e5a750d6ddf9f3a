"""Models, releases and the comparison of several releases."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from auditor.db import (
    AuditRun,
    BestScore,
    Certification,
    Dataset,
    Item,
    Model,
    PowerCurveRecord,
    Release,
)
from auditor.web.readmodels.common import (
    _KEYS_PER_QUERY,
    CE_NOTE,
    HISTORY_RUNS,
    L_INTERVAL_NOTE,
    _epoch_ms,
    _power_chart,
    _timeline_chart,
    best_gap,
    best_rows,
    cert_view,
    certified_since,
    curve_view,
    scorer_label,
)
from auditor.web.tables import Column, table_state

RELEASE_COLUMNS = (
    Column("release", "release"), Column("released", "released", first="desc"),
    Column("l", "L (95%)", numeric=True), Column("u_t", "U<sub>t</sub>", numeric=True),
    Column("s", "S (badge)", numeric=True, title="the S the badge's verdict read, against its threshold"),
    Column("s_paper", "S (paper)", numeric=True, title="the paper's Theorem 7 (one look at a fixed number of items)"),
    Column("verdict", "verdict"), Column("since", "certified since", first="desc"),
    Column("equivalence", "survey equivalence", sortable=False), Column("run", "run", numeric=True, first="desc"),
)

_RELEASE_KEYS = {
    "release": lambda r: r["i"], "released": lambda r: r["release"].released_at,
    "l": lambda r: r["view"]["l"], "u_t": lambda r: r["view"]["u_t"], "s": lambda r: r["view"]["s"],
    "s_paper": lambda r: r["view"]["s_paper"], "verdict": lambda r: (not r["view"]["certified"], r["view"]["verdict"]),
    "since": lambda r: (r["view"]["since"] or {}).get("run_id"), "run": lambda r: r["view"]["run_id"],
}


def _release_datasets(db: Session, release_ids: Select | list[int], workspace_id: int) -> list:
    """Datasets (id, name) on which any of these releases has a certification."""
    return db.execute(select(Dataset.id, Dataset.name).join(AuditRun, AuditRun.dataset_id == Dataset.id)
                      .join(Certification, Certification.audit_run_id == AuditRun.id)
                      .where(Certification.release_id.in_(release_ids), Dataset.workspace_id == workspace_id)
                      .distinct().order_by(Dataset.name)).all()


def _latest_certs(db: Session, release_ids: Select | list[int], dataset_id: int) -> dict[int, Certification]:
    """Each release's certification in the newest audit of the dataset that certified it."""
    ranked = (select(Certification.id, func.row_number().over(
        partition_by=Certification.release_id, order_by=Certification.audit_run_id.desc()).label("rn"))
        .join(AuditRun, Certification.audit_run_id == AuditRun.id)
        .where(AuditRun.dataset_id == dataset_id, Certification.release_id.in_(release_ids)).subquery())
    return {c.release_id: c for c in db.scalars(select(Certification).join(ranked, ranked.c.id == Certification.id)
                                                .where(ranked.c.rn == 1))}


def model_page(db: Session, model: Model, dataset_id: int | None, workspace_id: int, args=None) -> dict:
    releases = list(db.scalars(select(Release).where(Release.model_id == model.id)
                               .order_by(Release.released_at.asc().nulls_last(), Release.id)))
    datasets = _release_datasets(db, select(Release.id).where(Release.model_id == model.id), workspace_id)
    table = table_state("timeline", RELEASE_COLUMNS, default_sort="release", default_direction="desc",
                        per_page=25, args=args)
    out: dict = {"model": model, "datasets": datasets, "dataset_id": None, "rows": [], "chart": None,
                 "releases": releases, "table": table, "l_note": L_INTERVAL_NOTE}
    if not datasets:
        return out
    ds_id = dataset_id if dataset_id in {d.id for d in datasets} else datasets[0].id
    out["dataset_id"] = ds_id
    certs = _latest_certs(db, select(Release.id).where(Release.model_id == model.id), ds_id)
    curves: dict[tuple[int, int], list[PowerCurveRecord]] = defaultdict(list)
    for c in db.scalars(select(PowerCurveRecord).where(PowerCurveRecord.audit_run_id.in_({c.audit_run_id for c in certs.values()} or {-1}),
                                                 PowerCurveRecord.release_id.in_(list(certs) or [-1]))
                        .order_by(PowerCurveRecord.id)):
        curves[(c.release_id, c.audit_run_id)].append(c)
    since = certified_since(db, [(c, ds_id) for c in certs.values()])
    rows = []
    for i, r in enumerate(releases):
        c = certs.get(r.id)
        if c is None:
            continue
        rows.append({"i": i, "release": r, "cert": c, "view": cert_view(c, since.get((r.id, ds_id))),
                     "curves": [curve_view(x) for x in curves.get((r.id, c.audit_run_id), [])]})
    out["rows"] = rows
    out["previous"] = {after["release"].id: before["release"] for before, after in pairwise(rows)}
    if rows:
        out["chart"] = _timeline_chart(rows)
    table.page_rows(table.sort_rows(rows, _RELEASE_KEYS, tiebreak=lambda r: r["i"]))
    return out


def release_page(db: Session, release: Release, model: Model, dataset_id: int | None, workspace_id: int,
                 args=None) -> dict:
    """One release on one dataset: its verdict and what it rests on, since when it is certified,
    its survey equivalence and distance to BEST, and its history over the last audits."""
    datasets = _release_datasets(db, [release.id], workspace_id)
    table = table_state("history", (Column("run", "run", numeric=True, first="desc"),), default_sort="run",
                        default_direction="desc", per_page=25, args=args)
    out: dict = {"release": release, "model": model, "datasets": datasets, "dataset_id": None, "view": None,
                 "table": table, "curves": [], "best": [], "charts": [], "power_charts": [], "gaps": [],
                 "others": [], "l_note": L_INTERVAL_NOTE, "ce_note": CE_NOTE, "history_runs": HISTORY_RUNS}
    # Other releases to compare with: the model's, newest first (bounded).
    out["others"] = list(db.scalars(select(Release).where(Release.model_id == model.id, Release.id != release.id)
                                    .order_by(Release.released_at.desc().nulls_last(), Release.id.desc()).limit(100)))
    if not datasets:
        return out
    ds_id = dataset_id if dataset_id in {d.id for d in datasets} else datasets[0].id
    out["dataset_id"] = ds_id
    history = db.execute(select(Certification, AuditRun).join(AuditRun, Certification.audit_run_id == AuditRun.id)
                         .where(Certification.release_id == release.id, AuditRun.dataset_id == ds_id)
                         .order_by(AuditRun.id.desc()).limit(HISTORY_RUNS)).all()
    latest, run = history[0]
    since = certified_since(db, [(latest, ds_id)])
    out["view"] = cert_view(latest, since.get((release.id, ds_id)))
    out["run"] = run
    out["best"] = best_rows(db.scalars(select(BestScore).where(BestScore.audit_run_id == run.id)
                                       .order_by(BestScore.metric)))
    best = {b["metric"]: b for b in out["best"]}
    curves = list(db.scalars(select(PowerCurveRecord).where(PowerCurveRecord.audit_run_id == run.id).order_by(PowerCurveRecord.id)))
    mine = [c for c in curves if c.release_id == release.id]
    out["curves"] = [curve_view(c) for c in mine]
    out["gaps"] = [g for g in (best_gap(v, best) for v in out["curves"]) if g is not None]
    base = next((c for c in curves if c.release_id is None and c.vendor is None), None)
    for c in mine:
        human = base if base is not None and (base.combiner, base.scorer) == (c.combiner, c.scorer) else c
        out["power_charts"].append(_power_chart(human, [(f"{model.name} {release.version}", c)], best))
    # History, oldest first on the charts: the bounds (L with its interval) and the S values over the audits.
    rows = [{"view": cert_view(c), "run": r} for c, r in history]
    dated = [x for x in reversed(rows) if x["run"].finished_at is not None]
    if dated:
        xs = [_epoch_ms(x["run"].finished_at) for x in dated]
        v = [x["view"] for x in dated]
        out["charts"].append({
            "x_type": "time", "x_label": "audit (finished, UTC)", "y_label": "accuracy bounds",
            "series": [{"name": "L (model lower bound)", "points": [[x, y["l"]] for x, y in zip(xs, v, strict=True)],
                        "band": [[x, y["l_low"], y["l_high"]] for x, y in zip(xs, v, strict=True)]},
                       {"name": "U_t", "points": [[x, y["u_t"]] for x, y in zip(xs, v, strict=True)], "style": "dashed"},
                       {"name": "U_e", "points": [[x, y["u_e"]] for x, y in zip(xs, v, strict=True)], "style": "dotted"}],
            "badges": [{"x": x, "y": y["l"], "certified": y["certified"]} for x, y in zip(xs, v, strict=True)],
            "title": "L with its 95% interval against U_t and U_e, audit by audit"})
        threshold, bound, paper = out["view"]["threshold"], out["view"]["bound"], out["view"]["paper_method"]
        col = bound[-1]
        s_chart = {
            "x_type": "time", "x_label": "audit (finished, UTC)", "y_label": "confidence S", "y_digits": 4,
            "series": [{"name": f"S ({y_name})", "points": [[x, y[key]] for x, y in zip(xs, v, strict=True)]}
                       for key, y_name in ((f"s_anytime_{col}", f"anytime, {bound}"),
                                           (f"s_{paper}_{col}", f"paper {paper.upper()}, {bound}"))],
            "hlines": ([{"y": threshold, "kind": "threshold", "label": f"threshold {threshold}"}]
                       if threshold is not None else []),
            "title": "S, the confidence that the release beats the average annotator, audit by audit"}
        out["charts"].append(s_chart)
    table.page_rows(rows)
    return out


#: Releases one comparison puts side by side, at most.
COMPARE_MAX = 6
#: Items whose predictions a comparison reads for its per-item differences (in item id order),
#: and how many differing items it lists.
COMPARE_SCAN_ITEMS = 5_000
COMPARE_LISTED_ITEMS = 50
#: The compare form offers at most this many releases.
COMPARE_CHOICES = 500
#: The figures a comparison shows: (key, label, how to read it off a side); the difference of
#: each is the later release's value minus the first's.
_COMPARE_FIGURES = (
    ("l", "L", lambda s: (s["view"] or {}).get("l")),
    ("u_t", "U_t", lambda s: (s["view"] or {}).get("u_t")),
    ("u_e", "U_e", lambda s: (s["view"] or {}).get("u_e")),
    ("margin", "L − U_t", lambda s: (s["view"] or {}).get("margin")),
    ("s_anytime", "S anytime", lambda s: (s["view"] or {}).get("s_anytime_t")),
    ("s_paper", "S paper (OMS)", lambda s: (s["view"] or {}).get("s_oms_t")),
    ("s_badge", "S (badge)", lambda s: (s["view"] or {}).get("s")),
    ("n_items", "items behind L", lambda s: (s["view"] or {}).get("n_items_lower")),
)


def _difference(a, b) -> float | None:
    return b - a if isinstance(a, int | float) and isinstance(b, int | float) else None


def compare_choices(db: Session, workspace_id: int) -> list:
    """The releases one may compare: (release, model) rows by model name, newest first, at
    most :data:`COMPARE_CHOICES`."""
    return db.execute(select(Release, Model).join(Model, Release.model_id == Model.id)
                      .where(Model.workspace_id == workspace_id)
                      .order_by(Model.name, Release.released_at.desc().nulls_last(), Release.id.desc())
                      .limit(COMPARE_CHOICES)).all()


def compare_page(db: Session, workspace_id: int, chosen: list[tuple[Release, Model]], dataset_id: int | None) -> dict:
    """Releases side by side (two or more, the first the reference) on a dataset all were audited
    on: L with its interval and the items behind it, U, S (the badge's and the paper's), since
    when certified, each scorer's score, survey equivalence and gap to BEST, the difference of
    every figure from the first release, a warning when they rest on different items, and the
    items whose predicted labels differ."""
    ids = [rel.id for rel, _ in chosen]
    by_release: dict[int, set[int]] = defaultdict(set)
    names = {}
    for ds_id, name, rid in db.execute(
            select(Dataset.id, Dataset.name, Certification.release_id).join(AuditRun, AuditRun.dataset_id == Dataset.id)
            .join(Certification, Certification.audit_run_id == AuditRun.id)
            .where(Certification.release_id.in_(ids), Dataset.workspace_id == workspace_id).distinct()):
        by_release[rid].add(ds_id)
        names[ds_id] = name
    common = sorted(set.intersection(*(by_release[i] for i in ids)), key=lambda d: names[d])
    out: dict = {"pair": chosen, "chosen": chosen, "datasets": [(d, names[d]) for d in common], "dataset_id": None,
                 "sides": [], "chart": None, "power_charts": [], "l_note": L_INTERVAL_NOTE, "ce_note": CE_NOTE,
                 "figures": [], "warnings": [], "item_diffs": None}
    if not common:
        return out
    ds_id = dataset_id if dataset_id in common else common[0]
    out["dataset_id"] = ds_id
    certs = _latest_certs(db, ids, ds_id)
    since = certified_since(db, [(c, ds_id) for c in certs.values()])
    run_ids = sorted({c.audit_run_id for c in certs.values()})
    curves = list(db.scalars(select(PowerCurveRecord).where(PowerCurveRecord.audit_run_id.in_(run_ids or [-1]))
                             .order_by(PowerCurveRecord.id)))
    bests: dict[int, dict] = defaultdict(dict)
    for b in db.scalars(select(BestScore).where(BestScore.audit_run_id.in_(run_ids or [-1])).order_by(BestScore.metric)):
        bests[b.audit_run_id][b.metric] = best_rows([b])[0]
    for rel, mod in chosen:
        c = certs.get(rel.id)
        views = [curve_view(x) for x in curves if c is not None and x.release_id == rel.id
                 and x.audit_run_id == c.audit_run_id]
        best = bests.get(c.audit_run_id, {}) if c is not None else {}
        out["sides"].append({"release": rel, "model": mod, "view": cert_view(c, since.get((rel.id, ds_id))),
                             "curves": {v["scorer"]: v for v in views},
                             "gaps": {v["scorer"]: best_gap(v, best) for v in views}})
    out["scorers"] = sorted({k for s in out["sides"] for k in s["curves"]})
    out["figures"] = _compare_figures(out["sides"], out["scorers"])
    out["warnings"] = _compare_warnings(out["sides"])
    rows = [{"release": s["release"], "view": s["view"]} for s in out["sides"] if s["view"] is not None]
    if rows:
        out["chart"] = _timeline_chart(rows, label_of=lambda r: f"{r['release'].version}")
        out["chart"]["x_label"] = "release"
    newest = max(run_ids) if run_ids else None
    best = bests.get(newest, {})
    base = next((c for c in curves if c.audit_run_id == newest and c.release_id is None and c.vendor is None), None)
    for scorer in out["scorers"]:
        marked = [(f"{s['model'].name} {s['release'].version}", s["curves"][scorer].get("curve"))
                  for s in out["sides"] if scorer in s["curves"]]
        human = base if base is not None and base.scorer == scorer else marked[-1][1]
        out["power_charts"].append(_power_chart(human, marked, best))
    out["item_diffs"] = compare_items(db, db.get(Dataset, ds_id), ids)
    return out


def _compare_figures(sides: list[dict], scorers: list[str]) -> list[dict]:
    """Every figure of every side and its difference from the first side's."""
    readers = list(_COMPARE_FIGURES)
    for scorer in scorers:
        readers += [
            (f"score-{scorer}", scorer_label(scorer), lambda s, k=scorer: (s["curves"].get(k) or {}).get("score")),
            (f"equivalence-{scorer}", f"survey equivalence ({scorer.replace('_', ' ')})",
             lambda s, k=scorer: (s["curves"].get(k) or {}).get("equivalence")),
            (f"gap-{scorer}", f"gap to BEST ({scorer.replace('_', ' ')})",
             lambda s, k=scorer: (s["gaps"].get(k) or {}).get("gap")),
        ]
    out = []
    for key, label, read in readers:
        values = [read(s) for s in sides]
        out.append({"key": key, "label": label, "values": values,
                    "differences": [_difference(values[0], v) for v in values[1:]]})
    return out


def _compare_warnings(sides: list[dict]) -> list[str]:
    """What makes the differences hard to read: releases scored on different numbers of items,
    or in audits of different data versions."""
    out = []
    named = [(f"{s['model'].name} {s['release'].version}", s["view"]) for s in sides]
    counts = {name: v["n_items_lower"] for name, v in named if v is not None and v["n_items_lower"] is not None}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name}: {n:,}" for name, n in counts.items())
        out.append(f"These releases were scored on different items ({listed}): each difference mixes the change of "
                   "model with the change of items. Compare them on the same items (predictions for every "
                   "release on the same items) before reading a difference as the model's.")
    versions = {name: v["data_version"] for name, v in named if v is not None}
    if len(set(versions.values())) > 1:
        listed = ", ".join(f"{name}: {n}" for name, n in versions.items())
        out.append(f"Their latest verdicts come from audits of different data versions ({listed}).")
    missing = [name for name, v in named if v is None]
    if missing:
        out.append("Not audited on this dataset: " + ", ".join(missing) + ".")
    return out


def compare_items(db: Session, ds: Dataset | None, release_ids: list[int]) -> dict | None:
    """Items the releases label differently: the first :data:`COMPARE_SCAN_ITEMS` items (by id)
    that the first release predicted, each looked up for the others by the prediction key;
    at most :data:`COMPARE_LISTED_ITEMS` listed, with the plurality and gold beside them."""
    from auditor.db import Prediction
    from auditor.web.readmodels.items import plurality, predicted_label

    if ds is None or len(release_ids) < 2:
        return None
    first = list(db.execute(select(Prediction, Item).join(Item, Item.id == Prediction.item_id)
                            .where(Prediction.release_id == release_ids[0], Prediction.dataset_id == ds.id)
                            .order_by(Prediction.item_id).limit(COMPARE_SCAN_ITEMS)))
    item_ids = [p.item_id for p, _ in first]
    others: dict[tuple[int, int], Prediction] = {}
    for at in range(0, len(item_ids), _KEYS_PER_QUERY):
        chunk = item_ids[at:at + _KEYS_PER_QUERY]
        for p in db.scalars(select(Prediction).where(Prediction.release_id.in_(release_ids[1:]),
                                                     Prediction.item_id.in_(chunk))):
            others[(p.release_id, p.item_id)] = p
    labels = list(ds.labels)
    name = lambda code: labels[code] if code is not None and 0 <= code < len(labels) else None  # noqa: E731
    rows, n_differ, n_common = [], 0, 0
    for p, it in first:
        codes = [predicted_label(p)] + [predicted_label(others.get((r, p.item_id))) for r in release_ids[1:]]
        if any(c is None for c in codes):
            continue
        n_common += 1
        if len(set(codes)) == 1:
            continue
        n_differ += 1
        if len(rows) < COMPARE_LISTED_ITEMS:
            rows.append({"item": it.external_id, "labels": [name(c) for c in codes],
                         "plurality": [labels[i] for i in plurality(it.label_counts, len(labels))],
                         "gold": name(it.gold_label)})
    return {"rows": rows, "n_differ": n_differ, "n_common": n_common, "scanned": len(first),
            "capped": len(first) >= COMPARE_SCAN_ITEMS, "listed": COMPARE_LISTED_ITEMS, "dataset_id": ds.id}


# --- vendors and annotators ----------------------------------------------------------------------
