"""Audit planning: what to label next, and how much, to settle a release's certification.

A release shows "not certified" and the team has a labeling budget. :func:`plan_certification`
answers, for a grid of *designs* (so many new items with so many labels each, or so many
more labels on items already labelled), the probability that the verdict certifies the
release once that data has arrived, what it costs, and the cheapest design that reaches a
requested probability; or that no budget can certify it. :func:`relabel_priority` ranks
the labelled items by how much one more label is expected to tighten the certification
margin, and :func:`plan_equivalence` says how many items make a classifier's survey
equivalence interval narrower than a requested width.

**The generative model.** Future data are simulated from a model fitted to the current
data, as Homan et al. (2024) do by bootstrap for significance tests:

* A new item is drawn as a *template*, one of the current items (count vector :math:`m`,
  prediction :math:`d`), so the model's agreement with every label-count pattern is the
  observed one. Its :math:`k` labels are :math:`k` of the template's own labels drawn
  without replacement when :math:`k \\le K_m`: no model at all.
* More labels than an item has (:math:`k > K_m`, relabeling, and the limit of infinitely
  many) come from a label model, whichever of two families has the smaller AIC
  (:mod:`~auditor.stats.planning.label_model`): Dawid & Skene's (1979) latent-class model
  (a true class and one of 1–3 item-difficulty classes per item; labels independent draws
  from the annotator pool's confusion row; the model's own confusion per class), or a
  mixture of BEST's Dirichlet-multinomials (:func:`~auditor.stats.fit_dirichlet_multinomial`,
  fitted with item weights), two per class, each with the model's confusion on its items.
  Both are fitted by EM on the histogram of rows. Given an item's labels and prediction,
  its class and then its label distribution are drawn from their posterior, and the
  further labels from it. One Dirichlet-multinomial alone extrapolates badly: it
  underestimated the model's agreement with a 10-label plurality by 0.035 on simulated
  data where the chosen model is within 0.005, 0.015 when the model and the annotators
  share hard items (tests/stats/test_planning.py).
* Parameter uncertainty: every simulated future draws its own population, a Bayesian
  bootstrap (Dirichlet weights) over the templates (Rubin 1981). So the probabilities are
  posterior predictive ones: they include how unsure the current data leave the
  population margin, not only the sampling noise of the new data. (Calibrated, in
  simulation, over scenarios whose true margin the planner does not know; for one fixed
  truth no function of the current data can match the frequency of certification near
  the threshold, see ``bench/bench_plan_calibration.py`` and
  ``fixed_truth_error_bound`` in ``bench/_plan_calibration.py``.)
* What holds for one fixed truth is each design's *range*: the probability of certifying
  if the population margin is at either end of its ``confidence`` interval (the Bayesian
  bootstrap's), read off a logistic fit of the simulated verdicts against the simulated
  populations' margins. Given the current data, the chance of certifying grows with the
  true margin, so the range covers it whenever the interval covers the margin. The label
  model is refitted on bootstrap draws: its fitting error widens that interval where new
  items need the model, and it is in the infinite-label margin's bound behind "cannot be
  certified". The curve's own Monte Carlo error (finitely many futures) widens the range's
  ends too.

**The verdict simulated** is the one the badge uses: ``method="anytime"`` (default; the
betting e-process, :meth:`~auditor.stats.BettingStream.log_evalue_after`), ``"anytime-fan"``, or
the paper's fixed-sample ``"oms"`` / ``"hms"`` (and ``"bernstein"``), with the same bound,
threshold (``target``) and margin ``tau``. Under the anytime verdict an item's values are
frozen when it enters the stream (:class:`~auditor.stats.AnytimeState`): more labels on
items already counted cannot change it, so the anytime plan buys new items only and says
so; relabeling designs are planned for the fixed-sample verdicts. New items are assumed to
enter with all their labels (one audit after the whole batch arrives), and to be predicted
by the release.

Everything depends on the data only through the histogram of (count vector, prediction)
rows, so the cost of a plan grows with the number of distinct rows and designs, not with
the number of items: 100,000 items × 5 labels plan in a few seconds (``bench/bench_plan.py``).

References
----------
Xu, Walder & Xu, "Humanly Certifying Superhuman Classifiers", ICLR 2023 (the bounds).
Homan, Korn, Pandita & Welty, "How many ratings per item are necessary for reliable
significance testing?", 2024 (items × labels per item decides the outcome).
Lourie, Le Bras & Choi, "Scruples", AAAI 2021 (the Dirichlet-multinomial fit).
Rubin, "The Bayesian bootstrap", Annals of Statistics 9(1), 1981.
"""


from auditor.stats.planning.certification_plan import (
    DEFAULT_LABELS_PER_ITEM,
    DEFAULT_RELABEL_FRACTIONS,
    MAX_NEW_ITEMS,
    PLAN_METHODS,
    as_vendor_counts,
    plan_certification,
)
from auditor.stats.planning.equivalence_plan import plan_equivalence
from auditor.stats.planning.relabel import relabel_priority
from auditor.stats.planning.results import (
    CertificationPlan,
    Design,
    EquivalencePlan,
    LabelModel,
    RelabelPriority,
)

__all__ = [
    "CertificationPlan",
    "Design",
    "EquivalencePlan",
    "LabelModel",
    "RelabelPriority",
    "plan_certification",
    "plan_equivalence",
    "relabel_priority",
]

