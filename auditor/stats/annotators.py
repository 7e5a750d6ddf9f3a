"""Per-annotator lower bounds and per-group (vendor) upper bounds.

Theorem 3 of Xu, Walder & Xu applies to any labeler ``b`` scored against an
aggregate ``a`` it does not take part in: an annotator's agreement with the
leave-one-out plurality of the *other* annotators on the same items is a lower
bound on that annotator's oracle accuracy. A vendor's pool is a subset of
annotators, and Theorem 1 bounds its average annotator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from auditor.jsonable import finite
from auditor.stats._summary import num, table
from auditor.stats.certification import UpperBounds, tie_credit, upper_bounds
from auditor.stats.counts import Annotations
from auditor.stats.hoeffding import hoeffding_lower
from auditor.stats.validation import StatsInputError, check_probability

__all__ = ["AnnotatorBounds", "annotator_lower_bounds", "group_upper_bounds", "grouped_bounds_summary"]

_CHUNK = 1 << 20  # annotations per vectorised block: bounds memory at ~L × 8 MB


@dataclass(frozen=True)
class AnnotatorBounds:
    """Per-annotator agreement with the leave-one-out aggregate (Theorem 3).

    Arrays are aligned with ``annotators``.

    Attributes
    ----------
    annotators : tuple
        Annotator names.
    agreement : ndarray of float
        Mean tie-credited agreement with the plurality of the other annotators on the
        items both labeled: the point lower bound on oracle accuracy (NaN when the
        annotator shares no item with anyone).
    n_items : ndarray of int
        Items behind each value (items where at least one other annotator labeled).
    lower_confidence : ndarray of float
        Hoeffding lower confidence bound ``agreement - sqrt(log(1/(1-confidence)) / (2 n))``,
        clipped at 0: with probability ``confidence`` the annotator's oracle accuracy is
        at least this much (under Theorem 3's assumption).
    confidence : float
    """

    annotators: tuple
    agreement: np.ndarray
    n_items: np.ndarray
    lower_confidence: np.ndarray
    confidence: float

    def to_records(self) -> list[dict]:
        out = []
        for a, g, n, lo in zip(self.annotators, self.agreement, self.n_items, self.lower_confidence, strict=True):
            out.append({
                "annotator": a,
                "agreement": finite(g),
                "n_items": int(n),
                "lower_confidence": finite(lo),
            })
        return out

    def summary(self) -> str:
        """One row per annotator, best agreement first: agreement, its lower confidence
        bound and the items behind it ("—" where undefined)."""
        rows = [[str(r["annotator"])[:16], num(r["agreement"]), num(r["lower_confidence"]), str(r["n_items"])]
                for r in sorted(self.to_records(), key=lambda r: -(r["agreement"] or 0))]
        return "\n".join(table(["Annotator", "agreement", f"lower {self.confidence:.0%}", "items"], rows,
                                widths=[18, 9, 11, 7]))


def grouped_bounds_summary(bounds: Mapping) -> str:
    """A table of :func:`group_upper_bounds`' result: one row per group (e.g. vendor), by
    name, with U_t, U_e and the items behind U_t."""
    rows = [[str(g)[:16], num(u.theoretical), num(u.empirical), str(u.n_items)]
            for g, u in sorted(bounds.items(), key=lambda kv: str(kv[0]))]
    return "\n".join(table(["Vendor", "U_t", "U_e", "items"], rows, widths=[18, 6, 9, 9]))


def annotator_lower_bounds(annotations: Annotations, *, confidence: float = 0.95) -> AnnotatorBounds:
    """Each annotator's agreement with the leave-one-out plurality of the others.

    For annotation :math:`(n, a, \\ell)`, the others' counts on item :math:`n` are
    :math:`m_n - e_\\ell`; the annotator scores the tie credit of :math:`\\ell`
    against their plurality (1/T when :math:`\\ell` is among T tied labels). Items
    no other annotator labeled are skipped. The annotator's mean is, under
    Theorem 3's assumption, a lower bound on its oracle accuracy; a Hoeffding bound
    turns it into a finite-sample one.

    Parameters
    ----------
    annotations : Annotations
    confidence : float, default 0.95

    Returns
    -------
    AnnotatorBounds

    References
    ----------
    Xu, Walder & Xu (2023), Theorem 3 and Theorem 6.
    """
    if not isinstance(annotations, Annotations):
        raise StatsInputError("`annotations` must be an Annotations table (see annotations_from_records).")
    confidence = check_probability(confidence, name="confidence", open_interval=True)
    counts = annotations.counts().counts
    total = np.zeros(annotations.n_annotators)
    n = np.zeros(annotations.n_annotators, dtype=np.int64)
    for start in range(0, len(annotations), _CHUNK):
        sl = slice(start, start + _CHUNK)
        items, labs, anns = annotations.item[sl], annotations.label[sl], annotations.annotator[sl]
        others = counts[items].copy()
        others[np.arange(items.size), labs] -= 1
        credit = tie_credit(others, labs)
        ok = ~np.isnan(credit)
        total += np.bincount(anns[ok], weights=credit[ok], minlength=annotations.n_annotators)
        n += np.bincount(anns[ok], minlength=annotations.n_annotators)
    with np.errstate(invalid="ignore", divide="ignore"):
        agreement = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    return AnnotatorBounds(
        annotators=annotations.annotators,
        agreement=agreement,
        n_items=n,
        lower_confidence=hoeffding_lower(agreement, n, confidence=confidence),
        confidence=confidence,
    )


def group_upper_bounds(annotations: Annotations, groups: Mapping) -> dict:
    """Upper bounds (Theorem 1) for each group of annotators, e.g. each vendor.

    Parameters
    ----------
    annotations : Annotations
    groups : mapping annotator → group name
        Annotators absent from the mapping belong to no group.

    Returns
    -------
    dict
        group name → :class:`UpperBounds` computed on that group's labels only.
    """
    if not isinstance(annotations, Annotations):
        raise StatsInputError("`annotations` must be an Annotations table.")
    members: dict = {}
    for a in annotations.annotators:
        if a in groups:
            members.setdefault(groups[a], []).append(a)
    out: dict[object, UpperBounds] = {}
    for g, anns in members.items():
        out[g] = upper_bounds(annotations.subset(anns).counts())
    return out
