"""Survey power curves and survey equivalence (Resnick et al.).

How many human raters is a classifier worth? :func:`power_curve` gives c_k, the score
of k combined raters against a held-out reference rater; :func:`survey_equivalence`
finds where a classifier's score crosses that curve.
"""

from auditor.stats.equivalence._inputs import COMBINERS, SCORERS
from auditor.stats.equivalence.calibration import calibrate_probabilities
from auditor.stats.equivalence.curve import (
    ClassifierScore,
    ExpertEquivalence,
    PowerCurve,
    SurveyEquivalence,
    classifier_score,
    expert_equivalence,
    power_curve,
    survey_equivalence,
)
from auditor.stats.equivalence.plot import plot_power_curve

__all__ = [
    "COMBINERS",
    "SCORERS",
    "ClassifierScore",
    "ExpertEquivalence",
    "PowerCurve",
    "SurveyEquivalence",
    "calibrate_probabilities",
    "classifier_score",
    "expert_equivalence",
    "plot_power_curve",
    "power_curve",
    "survey_equivalence",
]
