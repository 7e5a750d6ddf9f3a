"""Chance-corrected agreement among annotators: Krippendorff's alpha, Fleiss' kappa and
pairwise Cohen's kappa, each with a bootstrap confidence interval over items.

Krippendorff's alpha (nominal) and Fleiss' kappa depend on the data only through the
per-item label-count vectors, so they are computed from the (N, L) count matrix and
bootstrapped by re-weighting the histogram of distinct count vectors, in blocks of
resamples: memory grows with the number of *distinct* count vectors, not with the
number of resamples, and each resample costs the cheaper of a multinomial over the
distinct vectors and an index draw over the items. Pairwise Cohen's kappa needs to know who gave which label and works on
:class:`~auditor.stats.counts.Annotations` (or an item × rater matrix).

References
----------
.. [K2011] K. Krippendorff (2011). "Computing Krippendorff's Alpha-Reliability".
   Annenberg School for Communication, University of Pennsylvania.
.. [F1971] J. L. Fleiss (1971). "Measuring nominal scale agreement among many raters".
   Psychological Bulletin 76(5), 378-382.
.. [G2014] K. L. Gwet (2014). *Handbook of Inter-Rater Reliability*, 4th ed.,
   Advanced Analytics (Fleiss' kappa with a varying number of raters per subject).
.. [C1960] J. Cohen (1960). "A coefficient of agreement for nominal scales".
   Educational and Psychological Measurement 20(1), 37-46.
"""

import sys
import types
import warnings

from auditor.stats.agreement.coefficients import fleiss_kappa, krippendorff_alpha
from auditor.stats.agreement.pairwise import pairwise_cohen_kappa
from auditor.stats.agreement.report import agreement_report
from auditor.stats.agreement.results import (
    AgreementCoefficient,
    AgreementReport,
    PairwiseKappa,
    UndefinedAgreementWarning,
)

__all__ = [
    "AgreementCoefficient",
    "AgreementReport",
    "PairwiseKappa",
    "UndefinedAgreementWarning",
    "agreement_report",
    "fleiss_kappa",
    "krippendorff_alpha",
    "pairwise_cohen_kappa",
]


class _CallableModule(types.ModuleType):
    """This package, callable as the function ``agreement`` once was (deprecated).

    The function of that name shadowed the subpackage in ``auditor.stats``; it is
    :func:`agreement_report` now. ``from auditor.stats import agreement`` then
    ``agreement(data)`` still works, with a :class:`DeprecationWarning`.
    """

    def __call__(self, *args, **kwargs) -> AgreementReport:
        warnings.warn("`auditor.stats.agreement(...)` is deprecated: call `agreement_report(...)`.",
                      DeprecationWarning, stacklevel=2)
        return agreement_report(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
