"""Auditor's statistics: pure numpy/scipy, usable on arrays or DataFrames.

Nothing here imports a database, web or task-queue library; every function takes
arrays (or count matrices) and keyword-only options and returns frozen dataclasses.
Importing it loads numpy and scipy only: pandas (which loads pyarrow) is imported inside
the functions that use it (the purity test pins this).
"""

from types import ModuleType as _ModuleType

# --- certification bounds (Xu et al.) ---
from auditor.stats.annotators import (
    AnnotatorBounds,
    annotator_lower_bounds,
    group_upper_bounds,
    grouped_bounds_summary,
)
from auditor.stats.anytime import (
    AnytimeState,
    BettingStream,
    ItemValues,
    anytime_confidence,
    item_values,
)
from auditor.stats.assumptions import (
    AssumptionReport,
    Theorem1Check,
    Theorem3Check,
    check_assumptions,
)
from auditor.stats.certification import (
    CertificationResult,
    Confidence,
    LowerBound,
    UndefinedBoundWarning,
    UpperBounds,
    certify,
    confidence,
    confidence_score,
    lower_bound,
    tie_credit,
    upper_bounds,
)
from auditor.stats.confseq import ConfidenceSequence, MeanStream, confidence_sequence
from auditor.stats.confusion import ConfusionMatrix, confusion_matrix
from auditor.stats.hoeffding import (
    hoeffding_delta,
    hoeffding_interval,
    hoeffding_lower,
    hoeffding_margin,
)
from auditor.stats.validation import StatsInputError

# --- vendor and annotator quality over time ---
# isort: split
from auditor.stats.counts import (
    Annotations,
    LabelCounts,
    RowHistogram,
    annotations_from_records,
    annotations_from_wide,
    count_histogram,
    counts_from_records,
    counts_from_wide,
    row_histogram,
    tally_counts,
)
from auditor.stats.quality import (
    ChangeReport,
    QualityMonitor,
    QualitySeries,
    detect_changes,
    quality_series,
)

# --- agreement coefficients ---
# isort: split
from auditor.stats.agreement import (
    AgreementCoefficient,
    AgreementReport,
    PairwiseKappa,
    UndefinedAgreementWarning,
    agreement_report,
    fleiss_kappa,
    krippendorff_alpha,
    pairwise_cohen_kappa,
)

# --- survey equivalence (Resnick et al.) ---
from auditor.stats.equivalence import (
    ClassifierScore,
    ExpertEquivalence,
    PowerCurve,
    SurveyEquivalence,
    calibrate_probabilities,
    classifier_score,
    expert_equivalence,
    plot_power_curve,
    power_curve,
    survey_equivalence,
)

# --- audit planning ---
# isort: split
from auditor.stats.planning import (
    CertificationPlan,
    Design,
    EquivalencePlan,
    LabelModel,
    RelabelPriority,
    plan_certification,
    plan_equivalence,
    relabel_priority,
)

# --- BEST performance (Lourie et al.) ---
# isort: split
from auditor.stats.best import (
    BEST_METRICS,
    BestPerformance,
    BestPerformanceWarning,
    DirichletMultinomialFit,
    best_performance,
    fit_dirichlet_multinomial,
)

__all__ = sorted(
    name for name, value in globals().items()
    if not name.startswith("_") and not isinstance(value, _ModuleType)
)
