"""The certification plan: designs, their probability of certifying, and what they cost."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from auditor.stats.certification import (
    ANYTIME_METHODS,
    BOUNDS,
    AnytimeState,
    _check_choice,
    _check_tau,
    _counts_array,
)
from auditor.stats.planning.label_model import (
    _gamma_weights,
    _limit_values,
    _Population,
    _population,
    _refits,
    _refitted_limit_margins,
    _rival_limit_draws,
)
from auditor.stats.planning.relabel import _relabel_rank, _relabel_sums
from auditor.stats.planning.results import CertificationPlan, Design
from auditor.stats.planning.simulation import (
    _atoms,
    _betting_certified,
    _Current,
    _current_sums,
    _fit_error_sd,
    _new_sums,
    _population_margins,
    _prepare,
    _probability_range,
    _verdict_scores,
)
from auditor.stats.validation import StatsInputError, as_rng, check_nonnegative, check_probability

#: Bisection steps that refine the smallest number of new items reaching the probability.
_REFINE_STEPS = 4

PLAN_METHODS = ("anytime", "anytime-fan", "oms", "hms", "bernstein")
#: Labels per new item tried when none are given (plus the data's own median).
DEFAULT_LABELS_PER_ITEM = (2, 3, 5, 7, 10, 15, 20)
#: Extra labels on existing items tried (fixed-sample verdicts), as fractions of the items.
DEFAULT_RELABEL_FRACTIONS = (0.05, 0.1, 0.25, 0.5, 1.0)
#: The largest number of new items a default grid goes to.
MAX_NEW_ITEMS = 10_000_000


def _check_int_grid(values, name, *, minimum: int) -> tuple[int, ...]:
    try:
        out = sorted({int(v) for v in values})
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"`{name}` must be a sequence of integers; got {values!r}.") from exc
    if any(float(v) != int(v) for v in values):
        raise StatsInputError(f"`{name}` must hold whole numbers; got {values!r}.")
    if not out or out[0] < minimum:
        raise StatsInputError(f"`{name}` must hold integers of at least {minimum}; got {values!r}.")
    return tuple(out)


def _nice_grid(lo: int, hi: int) -> list[int]:
    out, base = [], 1
    while base <= hi:
        for f in (1, 2, 5):
            v = f * base
            if lo <= v <= hi:
                out.append(v)
        base *= 10
    return out


def _prices(label_cost, vendors: Sequence[str | None]) -> dict:
    if label_cost is None:
        return {v: None for v in vendors}
    if isinstance(label_cost, Mapping):
        out = {}
        for v in vendors:
            if v is None:
                continue
            if v not in label_cost:
                raise StatsInputError(f"`label_cost` has no price for vendor {v!r}.")
            out[v] = _price(label_cost[v], f"label_cost[{v!r}]")
        return out
    p = _price(label_cost, "label_cost")
    return {v: p for v in vendors}


def _price(value, name) -> float:
    return check_nonnegative(value, name=name)


def plan_certification(counts, predictions, *, target: float = 0.95, tau: float = 0.0, method: str = "anytime",
                       bound: str = "theoretical", probability: float = 0.8, confidence: float = 0.8, label_cost=None,
                       vendor_counts: Mapping[str, object] | None = None, max_budget: float | None = None,
                       new_items: Sequence[int] | None = None, labels_per_item: Sequence[int] | None = None,
                       extra_labels: Sequence[int] | None = None, state: AnytimeState | None = None,
                       split: float = 0.5, n_simulations: int = 400, rule_out: float = 0.01,
                       rng=None) -> CertificationPlan:
    """Which labeling designs would get the release certified, with what probability, at what cost.

    Fits the generative model of :mod:`auditor.stats.planning` to the current data and,
    for every design on the grid, simulates ``n_simulations`` futures: a population (a
    Bayesian bootstrap of the templates), the design's data from it, and the verdict on
    the current data plus the new data. A design's probability is the fraction of
    futures in which the verdict certifies, with its Monte Carlo standard error. Designs:
    ``new_items`` × ``labels_per_item`` (per vendor when ``vendor_counts`` is given), and
    for the fixed-sample verdicts one more label on each of the ``extra_labels`` top items
    of :func:`relabel_priority`. Where the grid crosses ``probability``, the smallest
    number of new items is refined by bisection.

    "Cannot be certified at any budget" (``certifiable=False``) is the answer only when the
    upper end of the one-sided ``1 - rule_out`` interval of the population margin
    :math:`\\theta_L - \\tau - \\sqrt{\\theta_U}` of new items with infinitely many labels
    (however many such items are added, the stream means tend to it) is below zero, and so
    is every grid number of labels per item's. The interval comes from the label model
    refitted on Bayesian-bootstrap draws of the items, so it carries the model's fitting
    error, not only the sampling error of the items; and the latent-class label models AIC
    did not choose give their own bounds, the largest counting (which model extrapolates
    best to infinitely many labels is not something the data decide). An estimated margin below 0 that the
    data cannot rule out is said in the notes. The limit rests on the label model's
    extrapolation, hence the caution: a "cannot" is a strong claim.

    Parameters
    ----------
    counts : array-like of int, shape (N, L), LabelCounts or Annotations
        The release's items' label counts (rows in arrival order for ``"anytime"``).
    predictions : array-like, shape (N,) or (N, L)
        The release's predictions.
    target : float, default 0.95
        The confidence the verdict needs (``AUDITOR_CERTIFY_THRESHOLD``).
    tau : float, default 0
        The margin the model must beat the average annotator by.
    method : {"anytime", "anytime-fan", "oms", "hms", "bernstein"}
        The verdict (the badge's is ``"anytime"`` by default: the betting e-process of
        :class:`~auditor.stats.BettingStream`; ``"anytime-fan"`` the earlier pair of
        sequences).
    bound : {"theoretical", "empirical"}
    probability : float in (0, 1), default 0.8
        The probability of certifying the recommended design must reach.
    confidence : float in (0, 1), default 0.8
        The confidence of each design's ``probability_low``–``probability_high`` range: the
        probability of certifying at the ends of the population margin's equal-tailed
        interval at this confidence (see :class:`Design`), and of ``assured``.
    label_cost : float or mapping vendor → float, optional
        Price per label, flat or per vendor (per-vendor prices need ``vendor_counts``).
    vendor_counts : mapping vendor → (N, L) counts, optional
        Each vendor's labels on the same rows: new items are then planned per vendor,
        from that vendor's own label model.
    max_budget : float, optional
        Designs costing more (in price units, or in labels without prices) are left out.
    new_items, labels_per_item, extra_labels : sequences of int, optional
        The grid (defaults: 100, 200, 500, ... up to 10,000,000 or the budget; 2, 3, 5, 7,
        10, 15, 20 and the data's median; 5% to 100% of the items).
    state : AnytimeState, optional
        The release's stored anytime state (what the audit pipeline keeps); by default the
        rows of ``counts`` enter in order, as in :func:`~auditor.stats.certify`.
    split : float, default 0.5
        The anytime verdict's split of the error.
    n_simulations : int, default 400
        Simulated futures per design (standard error at most 0.025).
    rule_out : float, default 0.01
        "Cannot be certified" needs the infinite-label margin's upper ``1 - rule_out``
        bound below zero. 99% by default, not 95%: "at any budget" rests on the label
        model's extrapolation to infinitely many labels, whose own error the refits do not
        show (about −0.008 on average with hard items shared by the annotators and the
        model), so the claim is kept to the cases the data rule out clearly.
    rng : None, int or numpy Generator
        Seeds everything: the same seed gives the same plan, bit for bit.

    Returns
    -------
    CertificationPlan

    Examples
    --------
    >>> import numpy as np
    >>> from auditor.simulate import PoolScenario
    >>> sc = PoolScenario(hard_fraction=0.0, model_accuracy=0.95)
    >>> g = np.random.default_rng(0)
    >>> truth, hard = sc.items(g, 300)
    >>> plan = plan_certification(sc.labels(g, truth, hard, 5), sc.predictions(g, truth, hard), rng=1,
    ...                           labels_per_item=[5], new_items=[100, 1000, 10000])
    >>> plan.certifiable, plan.recommended.labels_per_item
    (True, 5)
    """
    _check_choice(method, PLAN_METHODS, "method")
    _check_choice(bound, BOUNDS, "bound")
    target = check_probability(target, name="target")
    probability = check_probability(probability, name="probability", open_interval=True)
    split = check_probability(split, name="split", open_interval=True)
    confidence = check_probability(confidence, name="confidence", open_interval=True)
    rule_out = check_probability(rule_out, name="rule_out", open_interval=True)
    tau = _check_tau(tau)
    if isinstance(n_simulations, bool) or not isinstance(n_simulations, int | np.integer) or n_simulations < 10:
        raise StatsInputError(f"`n_simulations` must be an integer of at least 10; got {n_simulations!r}.")
    r = int(n_simulations)
    if max_budget is not None:
        max_budget = _price(max_budget, "max_budget")
    gen = as_rng(rng)
    m, pred = _prepare(counts, predictions)
    k_items = m.sum(axis=1)
    if not (k_items > 0).any():
        raise StatsInputError("`counts` has no labelled item: there is nothing to plan from.")
    notes: list[str] = []
    pops, pooled = _fit_pools(m, pred, vendor_counts, label_cost, notes)
    prices = _prices(label_cost, [p.vendor for p in pops])
    cur, score_now = _current_verdict(m, pred, method=method, bound=bound, tau=tau, split=split, state=state,
                                      notes=notes)
    certified_now = bool(np.isfinite(score_now) and score_now >= target)
    sim = _Simulator(cur=cur, method=method, bound=bound, tau=tau, split=split, target=target, r=r,
                     confidence=confidence, prices=prices, max_budget=max_budget)
    ks, n_grid = _grids(k_items, labels_per_item, new_items, max_budget, sim.cheapest)
    designs = [Design(0, 0, 0, float(certified_now), 0.0, 0, 0.0 if sim.cheapest is not None else None,
                      probability_low=float(certified_now), probability_high=float(certified_now))]
    weights = {id(p): _gamma_weights(p, r, gen) for p in pops}
    seeds = gen.integers(0, 2**63 - 1, size=len(pops) * len(ks) + 2)
    refit_rng = np.random.default_rng(int(seeds[-2]))
    refits = {id(p): _refits(p, refit_rng) for p in pops}
    designs += _new_item_designs(sim, pops, ks, n_grid, weights, seeds, probability, refits)
    if method in ANYTIME_METHODS:
        notes.append("the anytime verdict freezes an item's values when it enters its stream: more labels on "
                     "items already counted cannot change it, so only new items are planned")
    else:
        designs += _relabel_designs(sim, m, pred, pops, pooled, extra_labels,
                                    np.random.default_rng(int(seeds[-1])), notes)
    rivals = {id(p): _rival_limit_draws(p, refit_rng, tau=tau) for p in pops}
    margins, certifiable_probability, upper_inf = _margins(pops, ks, weights, refits, bound=bound, tau=tau,
                                                           rule_out=rule_out, rivals=rivals)
    certifiable = certified_now or upper_inf >= 0.0
    _certifiability_notes(notes, certified_now, certifiable, max(margins.values()), upper_inf,
                          certifiable_probability, rule_out)
    designs = sorted(designs, key=lambda d: (d.cost if d.cost is not None else d.labels, d.labels, d.new_items,
                                             d.vendor or ""))
    reach = [d for d in designs if d.probability >= probability]
    recommended = reach[0] if reach else None
    assured = next((d for d in designs if d.probability_low is not None and d.probability_low >= probability), None)
    if recommended is None and certifiable:
        notes.append(f"no design within the grid and budget reaches probability {probability:g}")
    return CertificationPlan(
        designs=tuple(designs), recommended=recommended, certifiable=certifiable,
        certifiable_probability=certifiable_probability, margins=margins, certified_now=certified_now,
        score_now=score_now, probability=probability, target=target, tau=tau, method=method, bound=bound,
        n_simulations=r, models=tuple(p.model() for p in pops), notes=tuple(dict.fromkeys(notes)), assured=assured,
        confidence=confidence)


def _fit_pools(m: np.ndarray, pred: np.ndarray, vendor_counts, label_cost, notes: list[str]):
    """The label models new items are drawn from: one per vendor with ``vendor_counts``, else
    the pooled one (returned second; None per vendor, fitted later if relabeling needs it)."""
    if vendor_counts is None:
        if isinstance(label_cost, Mapping):
            raise StatsInputError("per-vendor prices (`label_cost` as a mapping) need `vendor_counts`.")
        pooled = _population(m, pred, None, notes)
        return [pooled], pooled
    if not isinstance(vendor_counts, Mapping) or not vendor_counts:
        raise StatsInputError("`vendor_counts` must map vendor names to count matrices.")
    pops: list[_Population] = []
    for name in sorted(vendor_counts, key=str):
        vc = as_vendor_counts(vendor_counts[name], m.shape, name)
        p = _population(vc, pred, str(name), notes)
        if p is None:
            notes.append(f"vendor {name} has no labels on these items: left out")
            continue
        pops.append(p)
    if not pops:
        raise StatsInputError("no vendor in `vendor_counts` has a label on these items.")
    return pops, None


def _current_verdict(m: np.ndarray, pred: np.ndarray, *, method: str, bound: str, tau: float, split: float,
                     state, notes: list[str]) -> tuple[_Current, float]:
    """The current data as the verdict sees it, and its score now.

    The anytime verdicts read the stored state (by default the rows enter in order, as in
    :func:`~auditor.stats.certify`). A state whose betting streams test another ``tau``, or
    that has none (a stored version-1 state), is rebuilt from the rows, as the audit
    pipeline rebuilds it, and a note says so.
    """
    cur = _current_sums(m, pred)
    if method not in ANYTIME_METHODS:
        zero = {s: (np.zeros(1), np.zeros(1), np.zeros(1)) for s in ("t", "e", "l")}
        return cur, float(_verdict_scores(cur, zero, method=method, bound=bound, tau=tau, split=split)[0])
    if state is not None and not isinstance(state, AnytimeState):
        raise StatsInputError("`state` must be an AnytimeState.")
    rebuild = state is None
    if state is not None and method == "anytime":
        empty = state.betting(bound).n == 0 and state.lower.n > 0
        if state.tau != tau or empty:
            notes.append("the stored anytime state's betting streams test another margin (or predate them): "
                         "they were rebuilt from the release's items in order")
            rebuild = True
    if rebuild:
        state = AnytimeState(tau=tau)
        state.update(m, pred)
    cur = _Current(anytime=state, t=cur.t, e=cur.e, l=cur.l)
    if method == "anytime":
        stream = state.betting(bound)
        return cur, (stream.confidence().score if stream.n else math.nan)
    ustream = state.upper_t if bound == "theoretical" else state.upper_e
    ok = ustream.n and state.lower.n
    return cur, (state.confidence(bound, method="anytime-fan", tau=tau, split=split).score if ok else math.nan)


def _grids(k_items: np.ndarray, labels_per_item, new_items, max_budget, cheapest) -> tuple[tuple, tuple]:
    """Labels per new item and numbers of new items to simulate (the defaults, or as passed)."""
    med_k = int(np.median(k_items[k_items > 0]))
    ks = _check_int_grid(labels_per_item, "labels_per_item", minimum=1) if labels_per_item is not None \
        else tuple(sorted(set(DEFAULT_LABELS_PER_ITEM) | {max(2, min(med_k, 50))}))
    if new_items is not None:
        return ks, _check_int_grid(new_items, "new_items", minimum=1)
    hi = MAX_NEW_ITEMS
    if max_budget is not None:
        per_item = min(ks) * (cheapest if cheapest is not None else 1.0)
        if per_item > 0:
            hi = int(min(hi, max_budget // per_item))
    return ks, tuple(_nice_grid(100, hi)) or ((hi,) if hi >= 1 else ())


@dataclass(eq=False)
class _Simulator:
    """What every design's simulation shares: the current data as the verdict sees it, the
    verdict's options, the prices and the budget."""

    cur: _Current
    method: str
    bound: str
    tau: float
    split: float
    target: float
    r: int
    confidence: float
    prices: dict
    max_budget: float | None

    @property
    def cheapest(self) -> float | None:
        return min((v for v in self.prices.values() if v is not None), default=None)

    def cost_of(self, labels: int, vendor) -> float | None:
        price = self.prices.get(vendor)
        return None if price is None else labels * price

    def affordable(self, labels: int, vendor) -> bool:
        if self.max_budget is None:
            return True
        c = self.cost_of(labels, vendor)
        return (c if c is not None else labels) <= self.max_budget + 1e-9

    def design(self, n, k, e, cert, vendor, theta=None, fit_sd=0.0, ranged=True) -> Design:
        p = float(np.mean(cert))
        labels = n * k + e
        low = high = None
        if ranged:
            lo, hi = _probability_range(theta, np.asarray(cert)[None, :], self.confidence, fit_sd)
            low, high = float(lo[0]), float(hi[0])
        return Design(new_items=int(n), labels_per_item=int(k) if n else 0, extra_labels_on_existing=int(e),
                      probability=p, std_error=math.sqrt(p * (1.0 - p) / self.r), labels=int(labels),
                      cost=self.cost_of(labels, vendor), vendor=vendor, probability_low=low, probability_high=high)

    def certified(self, new: dict) -> np.ndarray:
        """Whether each simulated future certifies; for the betting verdict the probability
        that it does given the future's items (the order they arrive in is random and the
        stream's running maximum counts: :func:`_betting_certified`)."""
        if self.method == "anytime":
            return _betting_certified(self.cur.anytime.betting(self.bound), new["pairs"], self.bound, self.target)
        s = _verdict_scores(self.cur, new, method=self.method, bound=self.bound, tau=self.tau, split=self.split)
        return np.nan_to_num(s, nan=-1.0) >= self.target

    def certified_many(self, news: list[dict]) -> list[np.ndarray]:
        """``certified`` of many designs; the sums-based verdicts in one vectorised call (the
        betting verdict reads each design's own values, one call each)."""
        if not news:
            return []
        if self.method == "anytime":
            return [self.certified(nw) for nw in news]
        joined = {key: tuple(np.concatenate([nw[key][i] for nw in news]) for i in range(3)) for key in ("t", "e", "l")}
        return np.split(self.certified(joined), len(news))


def _new_item_designs(sim: _Simulator, pops, ks, n_grid, weights, seeds, probability: float,
                      refits: dict) -> list[Design]:
    """New items, per population and labels per item. All designs' data are drawn first
    (nested along the number of items), then every verdict at once; then the smallest
    number of items reaching ``probability`` is refined by bisection. Each design's range
    is widened by the label model's fitting error where new items need the model."""
    designs: list[Design] = []
    paths = []
    for i, (pop, k) in enumerate((p, k) for p in pops for k in ks):
        sub = np.random.default_rng(int(seeds[i]))
        atoms = _atoms(pop, k, sub)
        pvals = weights[id(pop)] @ atoms.q
        pvals /= pvals.sum(axis=1, keepdims=True)
        h = np.zeros(pvals.shape, dtype=np.int64)
        done, steps = 0, []
        for n in n_grid:
            if not sim.affordable(n * k, pop.vendor):
                break
            h = h + sub.multinomial(n - done, pvals)
            done = n
            steps.append((n, h))
        paths.append({"pop": pop, "k": k, "atoms": atoms, "pvals": pvals, "rng": sub, "steps": steps,
                      "theta": _population_margins(pop, atoms, weights[id(pop)], bound=sim.bound, tau=sim.tau),
                      "fit_sd": _fit_error_sd(pop, k, atoms, refits[id(pop)], bound=sim.bound, tau=sim.tau)})
    grid_cert = sim.certified_many([_new_sums(pt["atoms"], h) for pt in paths for _, h in pt["steps"]])
    pos = 0
    for pt in paths:
        pt["p"] = []
        for n, _ in pt["steps"]:
            designs.append(sim.design(n, pt["k"], 0, grid_cert[pos], pt["pop"].vendor, pt["theta"], pt["fit_sd"]))
            pt["p"].append(designs[-1].probability)
            pos += 1
        first = next((j for j, p in enumerate(pt["p"]) if p >= probability), None)
        pt["active"] = first is not None
        if first is not None:
            pt["lo"] = pt["steps"][first - 1] if first else (0, np.zeros_like(pt["pvals"], dtype=np.int64))
            pt["hi"] = pt["steps"][first][0]
    return designs + _refine(sim, paths, probability)


def _refine(sim: _Simulator, paths: list[dict], probability: float) -> list[Design]:
    """Bisection between the last grid point below ``probability`` and the first above."""
    designs: list[Design] = []
    for _ in range(_REFINE_STEPS):
        todo = []
        for pt in paths:
            if not pt["active"]:
                continue
            lo_n, lo_h = pt["lo"]
            mid = round(math.sqrt(max(lo_n, 1) * pt["hi"]))
            if mid <= lo_n or mid >= pt["hi"]:
                pt["active"] = False
                continue
            hm = lo_h + pt["rng"].multinomial(mid - lo_n, pt["pvals"])
            todo.append((pt, mid, hm))
        if not todo:
            break
        certs = sim.certified_many([_new_sums(pt["atoms"], hm) for pt, _, hm in todo])
        for (pt, mid, hm), cert in zip(todo, certs, strict=True):
            d = sim.design(mid, pt["k"], 0, cert, pt["pop"].vendor, pt["theta"], pt["fit_sd"])
            designs.append(d)
            if d.probability >= probability:
                pt["hi"] = mid
            else:
                pt["lo"] = (mid, hm)
    return designs


def _relabel_designs(sim: _Simulator, m, pred, pops, pooled, extra_labels, rng, notes: list[str]) -> list[Design]:
    """One more label on each of the top items of the relabel list (fixed-sample verdicts)."""
    n_lab = int((m.sum(axis=1) > 0).sum())
    e_grid = _check_int_grid(extra_labels, "extra_labels", minimum=1) if extra_labels is not None else \
        tuple(sorted({max(1, round(f * n_lab)) for f in DEFAULT_RELABEL_FRACTIONS}))
    e_grid = tuple(e for e in e_grid if e <= n_lab)
    if not e_grid:
        return []
    if pooled is None:
        pooled = _population(m, pred, None, notes)
    rank = _relabel_rank(pooled, m, pred, sim.bound, sim.cur)
    designs = []
    for e in e_grid:
        if not any(sim.affordable(e, p.vendor) for p in pops):
            break
        chosen = rank.top(e)
        cert = sim.certified(_relabel_sums(m[chosen], pred[chosen], pooled, sim.r, rng))
        designs += [sim.design(0, 0, e, cert, pop.vendor, ranged=False) for pop in pops
                    if sim.affordable(e, pop.vendor)]
    notes.append("extra labels on existing items go one each to the top of the relabel list; they are "
                 "drawn from each item's posterior predictive (the pooled label model)")
    return designs


def _margins(pops, ks, weights, refits: dict, *, bound: str, tau: float,
             rule_out: float, rivals: dict | None = None) -> tuple[dict, float, float]:
    """The estimated population margin per number of labels per new item and its limit; the
    posterior probability that the best of them is positive; and the largest upper
    ``1 - rule_out`` bound of the infinite-label margin over the populations (from the
    label model refitted on bootstrap draws, :func:`_refitted_limit_margins`) and over the
    candidate label models AIC did not choose (``rivals``: :func:`_rival_limit_draws`), so
    that "cannot" needs every candidate's bound below zero."""
    margins: dict[str, float] = {}
    r = next(iter(weights.values())).shape[0]
    best_draws = np.full(r, -np.inf)
    upper_inf = -math.inf
    for pop in pops:
        g = weights[id(pop)]
        g_mean = pop.mult / pop.mult.sum()
        prefix = "" if pop.vendor is None else f"{pop.vendor}:"
        for k in ks:
            atoms = _atoms(pop, k, np.random.default_rng(0))
            x = atoms.x_t if bound == "theoretical" else atoms.x_e
            if atoms.k < 2 and bound == "empirical":
                continue
            ex, ec = atoms.q @ x, atoms.q @ atoms.credit
            margins[prefix + str(k)] = float(g_mean @ ec) - tau - math.sqrt(max(float(g_mean @ ex), 0.0))
            draws = g @ ec - tau - np.sqrt(np.maximum(g @ ex, 0.0))
            best_draws = np.maximum(best_draws, draws)
            upper_inf = max(upper_inf, float(np.quantile(draws, 1.0 - rule_out)))
        sq_inf, cr_inf = _limit_values(pop)
        margins[prefix + "inf"] = float(g_mean @ cr_inf) - tau - math.sqrt(max(float(g_mean @ sq_inf), 0.0))
        best_draws = np.maximum(best_draws, g @ cr_inf - tau - np.sqrt(np.maximum(g @ sq_inf, 0.0)))
        draws_inf = _refitted_limit_margins(refits[id(pop)], tau=tau)
        upper_inf = max(upper_inf, _upper_bound(draws_inf, margins[prefix + "inf"], rule_out))
        for est, draws in (rivals or {}).get(id(pop), []):
            upper_inf = max(upper_inf, _upper_bound(draws, est, rule_out))
    return margins, float(np.mean(best_draws > 0)), upper_inf


def _upper_bound(draws: np.ndarray, estimate: float, rule_out: float) -> float:
    """The upper end of the one-sided ``1 - rule_out`` interval of a margin from its refitted
    bootstrap draws (normal approximation: a few dozen draws pin a standard deviation far
    better than a tail quantile); never below the point estimate."""
    draws = draws[np.isfinite(draws)]
    if draws.size < 2:
        return estimate
    z = float(special.ndtri(1.0 - rule_out))
    return max(estimate, float(draws.mean())) + z * float(draws.std(ddof=1))


def _certifiability_notes(notes, certified_now, certifiable, best_est, upper, probability, rule_out) -> None:
    if not certifiable:
        notes.append(f"cannot be certified at any budget: the estimated L stays below U (by {-best_est:.4f} at "
                     "best) however many items and labels per item are added, and the upper "
                     f"{1 - rule_out:.0%} bound of that margin, the label model's fitting error included, is "
                     f"{upper:.4f}")
    elif best_est <= 0 and not certified_now:
        notes.append(f"the estimated L stays below U (by {-best_est:.4f} at best) however many items and labels "
                     "per item are added, so probably no budget certifies this release; the data do not rule it "
                     f"out (upper {1 - rule_out:.0%} bound of the margin {upper:.4f}; posterior probability "
                     f"{probability:.3f} that some budget could)")


def as_vendor_counts(counts, shape, name) -> np.ndarray:
    arr = _counts_array(counts)
    if arr.shape != tuple(shape):
        raise StatsInputError(f"`vendor_counts[{name!r}]` has shape {arr.shape}; the counts have {tuple(shape)}.")
    return arr
