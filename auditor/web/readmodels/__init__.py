"""Read models of the pages: one module per page family, one function per page, plain dicts
for the templates and charts. The queries live here; the pages (:mod:`auditor.web.pages`,
:mod:`auditor.web.ui`) only render what these return.

Conventions every page follows (and states where it shows them):

- **Cross-entropy** is shown in bits per label, lower is better: BEST's floor (which the
  statistics compute in nats) and the survey power curve's values (which the scorer keeps
  as the mean log2-probability of the held-out label, higher is better) alike, so the
  BEST tile and the curve's asymptote read on one scale.
- **L's interval** is the two-sided 95% Hoeffding interval over the items L rests on (the
  inequality behind the paper's S).
- **Bounded reads**: lists are paged (:mod:`auditor.web.tables`), histories capped
  (:data:`HISTORY_RUNS`), and no statement is issued per row.
"""

from auditor.web.readmodels.access import access_page
from auditor.web.readmodels.alerts import ALERT_STATUSES, alerts_page
from auditor.web.readmodels.annotators import (
    CONFUSION_GOLD_ITEMS,
    annotator_page,
    confusion_view,
    disagreements,
    leaderboard_page,
)
from auditor.web.readmodels.common import (
    CE_METRIC,
    CE_NOTE,
    HISTORY_RUNS,
    L_INTERVAL_NOTE,
    certified_since,
    l_interval,
)
from auditor.web.readmodels.datasets import dataset_page, feeds
from auditor.web.readmodels.overview import next_steps, overview, what_changed
from auditor.web.readmodels.releases import (
    COMPARE_MAX,
    compare_choices,
    compare_items,
    compare_page,
    model_page,
    release_page,
)
from auditor.web.readmodels.runs import audit_run_page, audit_runs
from auditor.web.readmodels.vendors import vendor_page, vendors_index

__all__ = [
    "ALERT_STATUSES",
    "CE_METRIC",
    "CE_NOTE",
    "COMPARE_MAX",
    "CONFUSION_GOLD_ITEMS",
    "HISTORY_RUNS",
    "L_INTERVAL_NOTE",
    "access_page",
    "alerts_page",
    "annotator_page",
    "audit_run_page",
    "audit_runs",
    "certified_since",
    "compare_choices",
    "compare_items",
    "compare_page",
    "confusion_view",
    "dataset_page",
    "disagreements",
    "feeds",
    "l_interval",
    "leaderboard_page",
    "model_page",
    "next_steps",
    "overview",
    "release_page",
    "vendor_page",
    "vendors_index",
    "what_changed",
]
