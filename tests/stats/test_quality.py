"""Vendor and annotator quality over time: windowed series, intervals and change alerts.

The calibration tests draw many histories from the simulator (weekly batches with a known
accuracy per annotator) and check the guarantees the module documents: the probability
of *any* false change alert over a whole stationary history, the detection of a real
drop, and the coverage of the windowed intervals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.simulate import Drift, HistoryScenario, draw_history, simulate_history
from auditor.stats import (
    StatsInputError,
    annotations_from_records,
    annotator_lower_bounds,
    upper_bounds,
)
from auditor.stats.monitoring import cusum_scan
from auditor.stats.quality import (
    QualityMonitor,
    detect_changes,
    quality_series,
    quality_units,
)

COLUMNS = {"group", "window_start", "window_end", "n_items", "n_labels", "agreement", "agreement_low",
           "agreement_high", "gold_accuracy", "gold_accuracy_low", "gold_accuracy_high"}


# --- dense helpers for the simulations ------------------------------------------------


def _dense_credit(label: np.ndarray, n_labels: int) -> np.ndarray:
    """Leave-one-out tie credit of every label against the other labels of its item."""
    onehot = np.eye(n_labels, dtype=np.int16)[label]
    others = onehot.sum(-2, keepdims=True) - onehot
    tied = others == others.max(-1, keepdims=True)
    hit = np.take_along_axis(tied, label[..., None].astype(np.int64), -1)[..., 0]
    return hit / tied.sum(-1)


def _vendor_units(draw, n_labels):
    """Per (stream, vendor, week): units (items), sum and sum of squares of per-item agreement."""
    credit = _dense_credit(draw.label, n_labels)
    n_vendors = int(draw.slot_vendor.max()) + 1
    unit = np.stack([credit[..., draw.slot_vendor == v].mean(-1) for v in range(n_vendors)], axis=1)
    return np.full(unit.shape[:3], unit.shape[3], float), unit.sum(-1), (unit * unit).sum(-1)


WEEKLY = HistoryScenario(weeks=50, items_per_week=500)


# --- the series -------------------------------------------------------------------------


def test_series_matches_the_leave_one_out_bounds_and_upper_bounds():
    records = simulate_history(HistoryScenario(weeks=3, items_per_week=80, seed=3))
    frame = pd.DataFrame(records)
    series = quality_series(frame, by="annotator", window="7D").to_frame()
    assert COLUMNS <= set(series.columns)
    assert len(series["window_start"].unique()) == 3
    # one window at a time, per annotator: the same as Theorem 3's leave-one-out agreement
    first = frame[pd.to_datetime(frame["timestamp"]) < pd.Timestamp("2026-01-12", tz="UTC")]
    ann = annotations_from_records(frame, labels=HistoryScenario().labels)
    full = annotator_lower_bounds(ann)
    expected = dict(zip(full.annotators, full.agreement, strict=True))
    whole = quality_series(frame, by="annotator", window="1000D").to_frame().set_index("group")
    for a, value in expected.items():
        assert whole.loc[a, "agreement"] == pytest.approx(value, abs=1e-12)
        assert whole.loc[a, "agreement_low"] <= value <= whole.loc[a, "agreement_high"]
    # U_t of a vendor on a window: Theorem 1 on that vendor's labels of that window's items
    vendor = quality_series(frame, by="vendor", window="7D").to_frame()
    acme = first[first["vendor"] == "acme-labeling"]
    counts = annotations_from_records(acme, labels=HistoryScenario().labels).counts()
    row = vendor[(vendor["group"] == "acme-labeling")].sort_values("window_start").iloc[0]
    ub = upper_bounds(counts)
    assert row["u_t"] == pytest.approx(ub.theoretical, abs=1e-12)
    assert row["u_e"] == pytest.approx(ub.empirical, abs=1e-12)
    assert row["u_t_low"] <= row["u_t"] <= row["u_t_high"]
    assert row["n_items"] == acme["item_id"].nunique() and row["n_labels"] == len(acme)


def test_gold_accuracy_per_window():
    records = [
        {"item_id": i, "annotator_id": a, "label": lab, "vendor": "v", "timestamp": ts}
        for i, a, lab, ts in [
            ("x", "a", "p", "2026-03-02"), ("x", "b", "p", "2026-03-02"), ("x", "c", "n", "2026-03-02"),
            ("y", "a", "n", "2026-03-10"), ("y", "b", "p", "2026-03-10"), ("y", "c", "p", "2026-03-10"),
        ]
    ]
    frame = quality_series(records, by="annotator", window="7D", gold={"x": "p", "y": "n"}).to_frame()
    got = {(r.group, r.window_start.day): r.gold_accuracy for r in frame.itertuples()}
    assert got == {("a", 2): 1.0, ("b", 2): 1.0, ("c", 2): 0.0, ("a", 9): 1.0, ("b", 9): 0.0, ("c", 9): 0.0}
    # agreement with the others' plurality: on x, c disagrees with (p, p); on y, a's n against (p, p)
    agree = {(r.group, r.window_start.day): r.agreement for r in frame.itertuples()}
    assert agree[("c", 2)] == 0.0 and agree[("a", 9)] == 0.0 and agree[("b", 9)] == 0.5


def test_batches_as_windows_and_bad_input_names_the_row():
    records = simulate_history(HistoryScenario(weeks=2, items_per_week=20, seed=5))
    frame = quality_series(records, by="vendor", window="batch").to_frame()
    # with time stamps, a batch's window runs from its first to its last label
    starts = sorted(frame["window_start"].unique())
    assert len(starts) == 2 and starts[1] - starts[0] >= pd.Timedelta(days=6)
    assert frame.groupby("group").size().eq(2).all()
    bad = [dict(r) for r in records[:10]]
    bad[4]["timestamp"] = "not a time"
    with pytest.raises(StatsInputError, match="row 4: field 'timestamp'"):
        quality_series(bad, window="7D")
    del bad[4]["timestamp"]
    with pytest.raises(StatsInputError, match="row 4: field 'timestamp' is missing"):
        quality_series(bad, window="7D")
    with pytest.raises(StatsInputError, match="window"):
        quality_series(records, window="fortnightly")
    with pytest.raises(StatsInputError, match="by"):
        quality_series(records, by="team")


def test_dense_simulation_units_equal_the_records_path():
    scenario = HistoryScenario(weeks=4, items_per_week=60, seed=9)
    draw = draw_history(scenario)
    n, s1, _ = _vendor_units(draw, 3)
    frame = pd.DataFrame(simulate_history(scenario))
    series = quality_series(frame, by="vendor", window="7D").to_frame()
    for v, vendor in enumerate(scenario.vendors):
        rows = series[series["group"] == vendor].sort_values("window_start")
        np.testing.assert_allclose(rows["agreement"].to_numpy(), s1[0, v] / n[0, v], atol=1e-12)


# --- the detector's guarantee -------------------------------------------------------------


@pytest.mark.parametrize("p", [0.5, 0.03])
def test_least_favourable_units_keep_the_false_alarm_bound(p):
    """Bernoulli units have the largest variance a [0, 1] mean allows (p = 0.5), or are the
    most skewed (p = 0.03, where normal approximations are worst). 2,000 streams, 52 looks each."""
    rng = np.random.default_rng(int(p * 1000))
    R, W, per = 2000, 52, 200
    s1 = rng.binomial(per, p, size=(R, W)).astype(float)
    n = np.full((R, W), per, float)
    found = cusum_scan(n, s1, s1, alpha=0.05, max_changes=1)
    # the yearly rate is computed for normal weekly statistics: 0.05 within two standard errors
    assert np.mean([bool(f) for f in found]) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / R)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=3, max_size=12), st.integers(0, 2**31 - 1))
def test_scan_is_invariant_to_how_units_are_spread_over_a_stream(sizes, seed):
    """A stream of identical units never flags, whatever the window sizes."""
    n = np.asarray([sizes], float)
    found = cusum_scan(n, 0.7 * n, 0.49 * n, alpha=0.05)
    assert found == [[]]
    del seed


# --- interval coverage ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("items_per_week", [40, 200])
def test_windowed_agreement_intervals_cover(items_per_week):
    scenario = HistoryScenario(weeks=150, items_per_week=items_per_week, seed=21)
    truth_draw = draw_history(HistoryScenario(weeks=40, items_per_week=5000, seed=99))
    n, s1, _ = _vendor_units(truth_draw, 3)
    truth = s1.sum(axis=2)[0] / n.sum(axis=2)[0]
    frame = quality_series(simulate_history(scenario), by="vendor", window="7D").to_frame()
    vendor_index = {v: i for i, v in enumerate(scenario.vendors)}
    true = np.asarray([truth[vendor_index[g]] for g in frame["group"]])
    covered = (frame["agreement_low"] <= true) & (true <= frame["agreement_high"])
    assert covered.mean() >= 0.93, covered.mean()
    # and the intervals are not merely wide: about the spread of the window estimates
    spread = frame.groupby("group")["agreement"].std().mean()
    width = (frame["agreement_high"] - frame["agreement_low"]).mean()
    assert width <= 1.25 * 2 * 1.96 * spread


# --- records front end and real data ------------------------------------------------------


def test_detect_changes_on_records_reports_the_drop():
    scenario = HistoryScenario(weeks=20, items_per_week=400, seed=13, drift=(Drift("crowdworks", 10, -0.15),))
    report = detect_changes(simulate_history(scenario), by="vendor", window="7D")
    changes = report.changes
    assert {"group", "detected_at", "start", "before", "after", "evidence"} <= set(changes.columns)
    crowd = changes[changes["group"] == "crowdworks"]
    assert len(crowd) >= 1
    first = crowd.iloc[0]
    start = pd.Timestamp(scenario.start).floor("D") + pd.Timedelta(weeks=10)
    assert abs(first["start"] - start) <= pd.Timedelta(weeks=2)
    assert first["direction"] == "drop" and first["after"] < first["before"]
    assert first["after_high"] < first["before_low"]
    assert 0 < first["evidence"] <= 0.05
    assert first["detected_at"] > first["start"]


def test_snow_rte_low_agreement_workers_in_a_second_batch_raise_an_alert(datasets_dir):
    frame = pd.read_csv(datasets_dir / "snow2008_mturk" / "all_collected_data" / "rte.standardized.tsv", sep="\t")
    records = frame.rename(columns={"orig_id": "item_id", "!amt_worker_ids": "annotator_id", "response": "label"})
    ann = annotations_from_records(records, labels=[0, 1])
    bounds = annotator_lower_bounds(ann)
    busy = bounds.n_items >= 500
    # the two workers with the most labels among those who agree least with the others
    worst = [bounds.annotators[i] for i in np.flatnonzero(busy)[np.argsort(bounds.agreement[busy])[:2]]]
    records = records.assign(vendor="mturk", batch=np.where(records["annotator_id"].isin(worst), 2, 1))
    report = detect_changes(records, by="vendor", window="batch", labels=[0, 1],
                            gold=dict(zip(frame["orig_id"], frame["gold"], strict=True)))
    drops = report.changes[report.changes["direction"] == "drop"]
    assert set(drops["metric"]) == {"agreement", "gold_accuracy"}
    assert (drops["group"] == "mturk").all() and (drops["start"] == 2).all()
    series = report.series.to_frame().set_index("window_start")
    assert series.loc[2, "agreement"] < series.loc[1, "agreement_low"]


def test_quality_units_aggregate_labels_of_one_item_into_one_unit():
    # two annotations of one item by one group in one window are one unit (their mean)
    units = quality_units(np.array([0, 0, 1]), np.array([1.0, 0.0, 1.0]), np.zeros(3, int), np.zeros(3, int), 1, 1)
    assert units.n.tolist() == [[2]] and units.s1.tolist() == [[1.5]] and units.s2.tolist() == [[1.25]]
    assert units.n_labels.tolist() == [[3]]


@pytest.mark.parametrize(("seed", "ranked"), [(0, False), (1, False), (2, True)])
def test_one_sort_sums_equal_the_per_annotation_path(seed, ranked, monkeypatch):
    """detect_changes sums the records from one sort of packed keys; the monitor scores each
    annotation (tie credit against the other labels of its item, gold correctness) and sums
    with quality_units and paired_sums. On records with ties, items spread over windows,
    several labels of one group on an item and partial gold, both give the same sums (also
    when the keys are too wide to pack and the (window, item) pairs are ranked first)."""
    from auditor.stats import quality_records
    from auditor.stats.certification import tie_credit
    from auditor.stats.monitoring import paired_sums
    from auditor.stats.quality_records import _code_records, _gold_codes, _record_sums

    if ranked:
        monkeypatch.setattr(quality_records, "KEY_LIMIT", 1000)

    rng = np.random.default_rng(seed)
    n_items, per_item, n_ann = 400, 4, 9
    item = np.repeat(np.arange(n_items), per_item)
    ann = (rng.integers(0, n_ann, n_items)[:, None] + np.arange(per_item)).ravel() % n_ann
    keep = rng.random(item.size) < 0.85  # some items keep one label: no agreement for them
    item, ann = item[keep], ann[keep]
    label = rng.integers(0, 3, item.size)
    day = rng.integers(0, 40, item.size)  # labels of one item fall in different weeks
    frame = pd.DataFrame({"item_id": [f"i{i}" for i in item], "annotator_id": ann, "label": label,
                          "vendor": [f"v{a % 3}" for a in ann],
                          "timestamp": pd.Timestamp("2026-03-02", tz="UTC") + pd.to_timedelta(day, unit="D")})
    gold = {f"i{i}": int(rng.integers(0, 3)) for i in range(0, n_items, 3)}
    coded = _code_records(frame, "vendor", "7D", [0, 1, 2], "2026-03-02")
    assert (coded.pairs is not None) == ranked
    n_windows, _, n_groups, _ = coded.shape
    sums = _record_sums(coded, _gold_codes(gold, coded.items, coded.labels))
    # the per-annotation path
    item_c = pd.Index(coded.items).get_indexer(frame["item_id"])
    group_c = pd.Index(coded.groups).get_indexer(frame["vendor"])
    window_c = (day // 7).astype(np.int64)
    counts = np.zeros((len(coded.items), 3), dtype=np.int64)
    np.add.at(counts, (item_c, label), 1)
    others = counts[item_c]
    others[np.arange(item_c.size), label] -= 1
    g = np.array([gold.get(f"i{i}", -1) for i in item])
    scores = {"agreement": tie_credit(others, label),
              "gold_accuracy": np.where(g >= 0, (label == g).astype(float), np.nan)}
    assert np.isnan(scores["agreement"]).any() and np.isnan(scores["gold_accuracy"]).any()
    for metric, score in scores.items():
        units = quality_units(item_c, score, group_c, window_c, n_groups, n_windows)
        ps = paired_sums(item_c, group_c, window_c, score, n_groups, n_windows)
        for got, want in zip(sums.units[metric], (units.n, units.s1, units.s2), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        for name in ("n", "s1", "s2", "s3", "level_n", "level_s1", "level_s2"):
            np.testing.assert_allclose(getattr(sums.paired[metric], name), getattr(ps, name), rtol=1e-12, atol=1e-12)
    cell = group_c * n_windows + window_c
    assert sums.n_labels.ravel().tolist() == np.bincount(cell, minlength=cell.max() + 1).tolist()
    n_unit = len({(c, i) for c, i in zip(cell, item_c, strict=True)})
    assert sums.n_items.sum() == n_unit == sums.x["t"][0].sum()


def test_monitor_fed_batch_by_batch_equals_the_offline_scan():
    scenario = HistoryScenario(weeks=12, items_per_week=300, seed=17, drift=(Drift("acme-labeling", 6, -0.2),))
    frame = pd.DataFrame(simulate_history(scenario))
    labels = list(scenario.labels)
    offline = detect_changes(frame, by="vendor", window="batch", labels=labels)
    item_codes, items = pd.factorize(frame["item_id"])
    label_codes = pd.Index(labels).get_indexer(frame["label"])
    counts = np.zeros((len(items), 3), dtype=np.int64)
    np.add.at(counts, (item_codes, label_codes), 1)
    monitor = QualityMonitor()
    for week in range(scenario.weeks):
        rows = np.flatnonzero(frame["batch"].to_numpy() == week)
        monitor.add_batch(week, item=item_codes[rows], group=frame["vendor"].to_numpy()[rows],
                          label=label_codes[rows], counts=counts)
    online = monitor.changes()
    cols = ["group", "metric", "direction", "before", "after", "evidence"]
    pd.testing.assert_frame_equal(online[cols].reset_index(drop=True), offline.changes[cols].reset_index(drop=True))
    # one change: the others' apparent rise (they look better against a degrading vendor) is explained by it
    assert list(online["start"]) == [6] and list(online["group"]) == ["acme-labeling"]
    assert list(online["direction"]) == ["drop"]
    with pytest.raises(StatsInputError, match="before the last window"):
        monitor.add_batch(3, item=item_codes[:1], group=["x"], label=label_codes[:1], counts=counts)



def test_monitor_state_round_trips_and_continues_like_the_original():
    """A service stores the monitor between audits (JSON) and resumes it: the resumed
    monitor finds the same changes, and its window rows are the offline series'."""
    import json

    scenario = HistoryScenario(weeks=12, items_per_week=300, seed=17, drift=(Drift("acme-labeling", 6, -0.2),))
    frame = pd.DataFrame(simulate_history(scenario))
    labels = list(scenario.labels)
    item_codes, items = pd.factorize(frame["item_id"])
    label_codes = pd.Index(labels).get_indexer(frame["label"])
    counts = np.zeros((len(items), 3), dtype=np.int64)
    np.add.at(counts, (item_codes, label_codes), 1)
    batch = frame["batch"].to_numpy()
    vendor = frame["vendor"].to_numpy()

    def feed(mon, weeks):
        for week in weeks:
            rows = np.flatnonzero(batch == week)
            mon.add_batch(week, item=item_codes[rows], group=vendor[rows], label=label_codes[rows], counts=counts)

    whole = QualityMonitor()
    feed(whole, range(12))
    first = QualityMonitor()
    feed(first, range(5))
    resumed = QualityMonitor.from_state(json.loads(json.dumps(first.to_state())))
    feed(resumed, range(5, 12))
    cols = ["group", "metric", "direction", "detected_at", "start", "before", "after", "evidence"]
    pd.testing.assert_frame_equal(resumed.changes()[cols], whole.changes()[cols])
    rows = pd.DataFrame(resumed.window_rows()).query("metric == 'agreement'")
    offline = quality_series(frame, by="vendor", window="batch", labels=labels).to_frame()
    offline["window"] = pd.factorize(offline["window_start"], sort=True)[0]
    merged = rows.merge(offline, on=["group", "window"], suffixes=("", "_offline"))
    assert len(merged) == len(rows) == len(offline)
    np.testing.assert_allclose(merged["value"], merged["agreement"], rtol=1e-12)
    np.testing.assert_allclose(merged["low"], merged["agreement_low"], rtol=1e-12)
    np.testing.assert_array_equal(merged["n_labels"], merged["n_labels_offline"])
    assert (rows["low"] <= rows["value"]).all() and (rows["value"] <= rows["high"]).all()


def test_a_state_stored_without_sums_of_cubes_is_read_without_a_skewness_correction():
    """States stored before the skewness correction hold three paired columns: they load,
    their cubes are zero (the chart then standardises as before), and the next write
    stores four."""
    import json

    rng = np.random.default_rng(3)
    counts = rng.multinomial(3, [0.6, 0.3, 0.1], size=200)
    mon = QualityMonitor()
    item = np.repeat(np.arange(200), 3)
    label = np.concatenate([np.repeat(np.arange(3), c) for c in counts])
    mon.add_batch(0, item=item, group=np.tile(["a", "b", "c"], 200), label=label, counts=counts)
    state = json.loads(json.dumps(mon.to_state()))
    assert state["version"] == 3 and np.asarray(state["paired"]["agreement"]).shape[-1] == 4
    for m in state["paired"]:
        state["paired"][m] = np.asarray(state["paired"][m])[..., :3].tolist()
    state["version"] = 2
    old = QualityMonitor.from_state(state)
    paired = old._paired["agreement"]
    assert paired.shape[-1] == 4 and not paired[..., 3].any()
    np.testing.assert_allclose(paired[..., :3], mon._paired["agreement"][..., :3])
    assert np.asarray(old.to_state()["paired"]["agreement"]).shape[-1] == 4


def test_labels_of_one_item_fed_in_different_batches_are_paired_with_keys():
    """Vendors delivering the same items in separate batches of one window: with the items'
    ids the monitor keeps the window's labels and gives the sums of one batch of all of them;
    without, each batch is scored alone and nothing is paired."""
    rng = np.random.default_rng(0)
    n_items = 300
    truth = rng.integers(0, 3, n_items)
    labels = {v: np.where(rng.random(n_items) < 0.85, truth, (truth + rng.integers(1, 3, n_items)) % 3)
              for v in "ABC"}
    final = np.zeros((n_items, 3), dtype=np.int64)
    for v in "ABC":
        np.add.at(final, (np.arange(n_items), labels[v]), 1)
    together = QualityMonitor()
    together.add_batch(0, item=np.tile(np.arange(n_items), 3), group=np.repeat(list("ABC"), n_items),
                       label=np.concatenate([labels[v] for v in "ABC"]), counts=final)
    keyed, alone = QualityMonitor(), QualityMonitor()
    counts = np.zeros((n_items, 3), dtype=np.int64)
    ids = np.arange(n_items) * 7 + 1000  # stable ids, not rows
    for v in "ABC":
        np.add.at(counts, (np.arange(n_items), labels[v]), 1)
        keyed.add_batch(0, item=np.arange(n_items), group=[v] * n_items, label=labels[v], counts=counts.copy(),
                        keys=ids)
        alone.add_batch(0, item=np.arange(n_items), group=[v] * n_items, label=labels[v], counts=counts.copy())
    for m in QualityMonitor.METRICS:
        np.testing.assert_allclose(keyed._paired[m], together._paired[m], atol=1e-9)
        np.testing.assert_allclose(keyed._sums[m], together._sums[m], atol=1e-9)
        np.testing.assert_allclose(keyed._level[m], together._level[m], atol=1e-9)
    np.testing.assert_array_equal(keyed.open_items(), ids)
    assert not alone._paired["agreement"][..., 0].any()
    # the kept labels survive the stored state; a new window closes the old one as it stands
    resumed = QualityMonitor.from_state(keyed.to_state())
    resumed.add_batch(1, item=np.arange(3), group=["A", "B", "C"], label=[0, 0, 1], counts=counts[:3], keys=ids[:3])
    np.testing.assert_allclose(resumed._paired["agreement"][:, 0], together._paired["agreement"][:, 0], atol=1e-9)
    assert resumed.open_items().size == 3
