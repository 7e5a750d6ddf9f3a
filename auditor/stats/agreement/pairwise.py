"""Pairwise Cohen's kappa between annotators who share items, with bootstrap intervals
of the mean over pairs; memory bounded by the annotator pairs that share items."""

from __future__ import annotations

import warnings

import numpy as np

from auditor.stats.agreement.bootstrap import _BLOCK_CELLS, _check_bootstrap_args, _interval
from auditor.stats.agreement.results import PairwiseKappa, UndefinedAgreementWarning
from auditor.stats.counts import Annotations, LabelCounts
from auditor.stats.validation import (
    StatsInputError,
    as_rng,
)

__all__ = ["pairwise_cohen_kappa"]
# The pairwise-kappa bootstrap lists the label pairs (two annotations of one item)
# once when there are at most this many (about 40 bytes each), and otherwise
# recomputes one sparse product per resample.
_PAIR_LIST_MAX = 1 << 23


# ---------------------------------------------------------------------------
# pairwise Cohen's kappa


def _long_form(data) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple, int]:
    """(item, annotator, label) codes, annotator names and the number of classes."""
    if isinstance(data, Annotations):
        return data.item, data.annotator, data.label, data.annotators, data.n_labels
    if isinstance(data, LabelCounts):
        raise StatsInputError(
            "`annotations` is a label-count matrix: pairwise Cohen's kappa needs who gave which "
            "label (an Annotations table or an item × rater matrix)."
        )
    names = None
    if hasattr(data, "to_numpy") and hasattr(data, "columns"):
        names = tuple(data.columns)
        data = data.to_numpy()
    arr = np.asarray(data)
    if arr.ndim != 2:
        raise StatsInputError(
            f"`annotations` must be an Annotations table or a 2-D item × rater matrix; got shape {arr.shape}."
        )
    if arr.size == 0:
        raise StatsInputError("`annotations` is empty.")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise StatsInputError(
            f"`annotations` matrix must hold integer class indices; got dtype {arr.dtype} "
            "(build an Annotations table with annotations_from_wide for label names)."
        )
    vals = arr.astype(np.float64)
    present = ~(np.isnan(vals) | (vals == -1))
    bad = present & ((vals < 0) | (vals != np.round(vals)) | ~np.isfinite(vals))
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise StatsInputError(
            f"`annotations` row {r}, rater {c}: {arr[r, c]!r} is not a class index (use -1 or NaN for missing)."
        )
    if not present.any():
        raise StatsInputError("`annotations` has no labels: every entry is missing.")
    item, ann = np.nonzero(present)
    label = vals[item, ann].astype(np.int64)
    names = tuple(range(arr.shape[1])) if names is None else names
    return item.astype(np.int64), ann.astype(np.int64), label, names, int(label.max()) + 1


def _incidence(item: np.ndarray, ann: np.ndarray, label: np.ndarray, n_ann: int, n_labels: int,
               n_items: int, weights: np.ndarray | None = None):
    """Sparse (annotator × class) × item incidence: entry ``(a·L + c, n)`` is the weight
    of item ``n`` (1 without weights) where annotator ``a`` gave class ``c`` on it."""
    from scipy import sparse

    data = np.ones(item.size) if weights is None else weights[item]
    return sparse.csr_matrix((data, (ann * n_labels + label, item)), shape=(n_ann * n_labels, n_items))


def _pair_cells(left, right, n_ann: int, n_labels: int):
    """Confusion cells of every annotator pair a < b sharing an item.

    ``left @ right.T`` has entry ``(a·L + i, b·L + j)`` = (weighted) number of items on
    which ``a`` gave class ``i`` and ``b`` class ``j``: one sparse product, whose
    size is the annotator pairs that share items times the class pairs they use, not
    the pairs of annotations. Returns pair codes ``a·R + b``, ``i``, ``j`` and counts.
    """
    product = (left @ right.T).tocoo()
    a, i = np.divmod(product.row.astype(np.int64), n_labels)
    b, j = np.divmod(product.col.astype(np.int64), n_labels)
    keep = a < b
    return a[keep] * n_ann + b[keep], i[keep], j[keep], product.data[keep]


def _pairs_within_items(item: np.ndarray, annotator: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (first, second) of every pair of annotations on the same item, with
    ``annotator[first] < annotator[second]``, fully vectorised."""
    order = np.lexsort((annotator, item))
    it = item[order]
    starts = np.flatnonzero(np.r_[True, it[1:] != it[:-1]])
    sizes = np.diff(np.r_[starts, it.size])
    pos = np.arange(it.size) - np.repeat(starts, sizes)
    n_after = np.repeat(sizes, sizes) - pos - 1  # partners following each annotation
    first = np.repeat(np.arange(it.size), n_after)
    offset = np.arange(first.size) - np.repeat(np.cumsum(n_after) - n_after, n_after) + 1
    return order[first], order[first + offset]


def _pair_kappas(pair: np.ndarray, i: np.ndarray, j: np.ndarray, count: np.ndarray, n_pairs: int,
                 n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """Cohen's kappa and overlap of pairs ``0..n_pairs-1`` from their confusion cells
    ``(pair, i, j, count)`` (NaN where undefined or the pair shares no item)."""
    n = np.bincount(pair, weights=count, minlength=n_pairs)
    same = i == j
    agree = np.bincount(pair[same], weights=count[same], minlength=n_pairs)
    rows = np.bincount(pair * n_labels + i, weights=count, minlength=n_pairs * n_labels).reshape(n_pairs, n_labels)
    cols = np.bincount(pair * n_labels + j, weights=count, minlength=n_pairs * n_labels).reshape(n_pairs, n_labels)
    return _kappas(n, agree, rows, cols)


def _conf_kappas(conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cohen's kappa and overlap of each (P, L, L) confusion matrix (NaN if undefined)."""
    return _kappas(conf.sum(axis=(1, 2)), np.trace(conf, axis1=1, axis2=2), conf.sum(axis=2), conf.sum(axis=1))


def _kappas(n: np.ndarray, agree: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kappa from each pair's shared items ``n``, agreements and the two class margins."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p_o = agree / n
        p_e = np.einsum("pc,pc->p", rows, cols) / (n * n)
        kappa = (p_o - p_e) / (1.0 - p_e)
    # p_e = 1 exactly when both raters used one and the same class on every shared item.
    undefined = (n == 0) | ((rows == n[:, None]) & (cols == n[:, None])).any(axis=1)
    kappa[undefined] = np.nan
    return kappa, n


def _items_of_pairs(item: np.ndarray, ann: np.ndarray, eligible: np.ndarray, ineligible: np.ndarray,
                    n_ann: int) -> np.ndarray:
    """Sorted codes of the items labeled by both annotators of some pair in ``eligible``
    (codes ``a·R + b``; ``ineligible``: the other pairs sharing items).

    An item enters when the annotator pairs on it, ``K(K-1)/2``, are not all
    ineligible, or when it holds an eligible pair: whichever of the two pair sets is
    smaller is counted per item, through a sparse product in blocks of items.
    """
    from scipy import sparse

    n_items = int(item.max()) + 1
    per_item = np.bincount(item, minlength=n_items)
    if ineligible.size == 0:
        return np.flatnonzero(per_item >= 2)
    if eligible.size == 0:
        return np.zeros(0, dtype=np.int64)
    use_eligible = eligible.size <= ineligible.size
    a, b = np.divmod(eligible if use_eligible else ineligible, n_ann)
    adjacency = sparse.csr_matrix((np.ones(a.size), (a, b)), shape=(n_ann, n_ann))
    adjacency = adjacency + adjacency.T
    labeled = sparse.csr_matrix((np.ones(item.size), (item, ann)), shape=(n_items, n_ann))
    counted = np.zeros(n_items)
    step = max(1, _BLOCK_CELLS // max(1, n_ann))
    for start in range(0, n_items, step):
        block = labeled[start:start + step]
        # Entry (n, b): partners of b (in the counted set) that labeled n, kept where b
        # labeled n; the row sum counts each such pair on item n twice.
        counted[start:start + step] = np.asarray((block @ adjacency).multiply(block).sum(axis=1)).ravel() / 2
    if use_eligible:
        return np.flatnonzero(counted > 0)
    return np.flatnonzero(per_item * (per_item - 1) / 2 - counted > 0)


def _pair_means(kappa: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Overlap-weighted and unweighted means over pairs (last axis), ignoring NaN."""
    ok = np.isfinite(kappa)
    w = np.where(ok, n, 0.0)
    k0 = np.where(ok, kappa, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        weighted = (w * k0).sum(axis=-1) / w.sum(axis=-1)
        unweighted = k0.sum(axis=-1) / ok.sum(axis=-1)
    return weighted, unweighted


def _bootstrap_means(item, ann, label, in_pair, entering, eligible, *, n_ann: int, n_labels: int,
                     n_bootstrap: int, gen) -> tuple[np.ndarray, np.ndarray]:
    """The two means of pair kappas (overlap-weighted, unweighted) in each item-bootstrap
    resample of ``entering``, the eligible pairs fixed (see :func:`pairwise_cohen_kappa`'s notes)."""
    n_items_total = int(item.max()) + 1
    n_p = eligible.size
    # Only the annotations of annotators in eligible pairs enter a resample.
    sel = in_pair[ann]
    s_item, s_ann, s_label = item[sel], ann[sel], label[sel]
    boot_w = np.empty(n_bootstrap)
    boot_u = np.empty(n_bootstrap)
    per_item = np.bincount(s_item, minlength=n_items_total)
    listed = int((per_item * (per_item - 1) // 2).sum()) <= _PAIR_LIST_MAX
    if listed:
        # Few enough label pairs to list once: each resample is then one bincount
        # (four with many pairs × classes) over the list, weighted by the items'
        # multiplicities.
        first, second = _pairs_within_items(s_item, s_ann)
        code = s_ann[first] * n_ann + s_ann[second]
        on = np.isin(code, eligible)
        first, second = first[on], second[on]
        l_pair = np.searchsorted(eligible, code[on])
        l_i, l_j, l_item = s_label[first], s_label[second], s_item[first]
        del first, second, code, on
        # One bincount per resample into the (pair, i, j) cells when they are few.
        l_cell = l_pair * n_labels * n_labels + l_i * n_labels + l_j if n_p * n_labels**2 <= _PAIR_LIST_MAX else None
    else:
        right = _incidence(s_item, s_ann, s_label, n_ann, n_labels, n_items_total)
    for r in range(n_bootstrap):
        draw = gen.integers(0, entering.size, size=entering.size)
        weights = np.bincount(entering[draw], minlength=n_items_total).astype(np.float64)
        if listed and l_cell is not None:
            conf = np.bincount(l_cell, weights=weights[l_item], minlength=n_p * n_labels * n_labels)
            kb, nb = _conf_kappas(conf.reshape(n_p, n_labels, n_labels))
        elif listed:
            kb, nb = _pair_kappas(l_pair, l_i, l_j, weights[l_item], n_p, n_labels)
        else:
            # Too many label pairs to hold: one sparse product per resample, in
            # memory bounded by the sharing annotator pairs.
            bp, bi, bj, bc = _pair_cells(_incidence(s_item, s_ann, s_label, n_ann, n_labels, n_items_total,
                                                    weights), right, n_ann, n_labels)
            bkeep = np.isin(bp, eligible)
            kb, nb = _pair_kappas(np.searchsorted(eligible, bp[bkeep]), bi[bkeep], bj[bkeep], bc[bkeep],
                                  n_p, n_labels)
        boot_w[r], boot_u[r] = _pair_means(kb, nb)
    return boot_w, boot_u


def pairwise_cohen_kappa(annotations, *, min_overlap: int = 10, n_bootstrap: int = 200,
                         confidence: float = 0.95, interval: str = "percentile",
                         rng=None) -> PairwiseKappa:
    r"""Cohen's kappa for every pair of annotators sharing at least ``min_overlap`` items.

    For annotators :math:`a, b` and their :math:`n_{ab}` shared items, with
    :math:`p_o` the fraction of shared items given the same class and
    :math:`p_{a,c}`, :math:`p_{b,c}` each one's class proportions on those items
    [C1960]_:

    .. math::

        \kappa_{ab} = \frac{p_o - p_e}{1 - p_e}, \qquad p_e = \sum_c p_{a,c}\, p_{b,c}.

    This is ``sklearn.metrics.cohen_kappa_score`` (unweighted) on the shared items of
    each pair, computed for all pairs at once (see the notes).
    The summaries are the overlap-weighted mean
    :math:`\sum n_{ab}\kappa_{ab} / \sum n_{ab}` (``mean_weighted``: pairs that
    share more items count more) and the unweighted mean over pairs
    (``mean_unweighted``).

    Parameters
    ----------
    annotations : Annotations, or array-like / DataFrame of shape (N, R)
        Who gave which label: an :class:`~auditor.stats.counts.Annotations` table, or
        an item × rater matrix of class indices ``0..L-1`` with ``-1`` (or NaN) where a
        rater gave no label (a DataFrame's columns name the raters).
    min_overlap : int, default 10
        Pairs sharing fewer items get NaN and stay out of the means.
    n_bootstrap : int, default 200
        Item-bootstrap resamples for the intervals of the two means; 0 skips them.
        Each resample costs one pass over all label pairs, hence the lower default.
    confidence : float, default 0.95
    interval : {"percentile", "basic"}, default "percentile"
        See :func:`krippendorff_alpha` and the notes below.
    rng : None, int or numpy.random.Generator

    Returns
    -------
    PairwiseKappa
        Pair kappas and overlaps as (R, R) matrices, the two means and their
        bootstrap intervals. Pairs whose kappa is undefined (both annotators used
        one same class on all shared items) are NaN, counted in ``n_pairs_undefined``
        and left out of the means; a warning says so.

    Raises
    ------
    StatsInputError
        Label counts instead of who-labeled-what, a matrix entry that is not a class
        index or -1/NaN, no labels, bad ``min_overlap`` / ``n_bootstrap`` /
        ``confidence`` / ``interval`` / ``rng``.

    Warns
    -----
    UndefinedAgreementWarning
        When some eligible pairs, or all of them, have an undefined kappa.

    Notes
    -----
    The confusion counts of all pairs come from one sparse product of the
    (annotator × class) × item incidence matrix with itself, so memory grows with
    the annotator pairs that share items (times the class pairs they use), not with
    the pairs of annotations :math:`\sum_n K_n(K_n-1)/2`; time grows with the latter.
    A bootstrap resample re-weights the items: with at most ``_PAIR_LIST_MAX`` label
    pairs they are listed once and each resample is one ``bincount``, otherwise each
    resample is one weighted sparse product. The set of eligible pairs is fixed on the
    original data; a resample in which a pair shares no item leaves that pair out.

    Kappa on few items is biased, typically downwards (its chance term is estimated
    from the same few items). When many pairs share only a few items each (a sparse crowd
    design), the means inherit that bias, the resampled means sit lower still, and
    the percentile interval can lie entirely below the estimate; the ``"basic"``
    interval corrects such a shift to first order, and a larger ``min_overlap``
    reduces its cause.

    References
    ----------
    J. Cohen (1960), "A coefficient of agreement for nominal scales".

    Examples
    --------
    >>> m = [[0, 0], [0, 1], [1, 1], [1, 1], [0, 0], [1, 0]]
    >>> res = pairwise_cohen_kappa(m, min_overlap=2, n_bootstrap=0)
    >>> round(float(res.kappa[0, 1]), 4)
    0.3333
    """
    item, ann, label, names, n_labels = _long_form(annotations)
    if isinstance(min_overlap, bool) or not isinstance(min_overlap, int | np.integer) or min_overlap < 1:
        raise StatsInputError(f"`min_overlap` must be a positive integer; got {min_overlap!r}.")
    n_bootstrap, confidence = _check_bootstrap_args(n_bootstrap, confidence, interval)
    gen = as_rng(rng)
    n_ann = len(names)

    n_items_total = int(item.max()) + 1
    ones = _incidence(item, ann, label, n_ann, n_labels, n_items_total)
    pair, ci, cj, count = _pair_cells(ones, ones, n_ann, n_labels)
    codes, pair_idx = np.unique(pair, return_inverse=True)
    shared = np.bincount(pair_idx, weights=count, minlength=codes.size).astype(np.int64)
    overlap = np.zeros((n_ann, n_ann), dtype=np.int64)
    a_all, b_all = np.divmod(codes, n_ann)
    overlap[a_all, b_all] = shared
    overlap[b_all, a_all] = shared

    eligible = codes[shared >= min_overlap]  # codes a * R + b, a < b, sorted
    n_p = eligible.size
    keep = np.isin(pair, eligible)
    kappa_p, n_p_items = _pair_kappas(np.searchsorted(eligible, pair[keep]), ci[keep], cj[keep], count[keep],
                                      n_p, n_labels)
    weighted, unweighted = _pair_means(kappa_p, n_p_items)
    n_undefined = int(np.isnan(kappa_p).sum())
    if n_undefined:
        warnings.warn(
            f"Cohen's kappa is undefined for {n_undefined} of {n_p} annotator pairs "
            "(both used one same class on every shared item); they are left out of the means.",
            UndefinedAgreementWarning, stacklevel=2,
        )
    if n_p == n_undefined:
        warnings.warn(
            f"no annotator pair shares {min_overlap} items with a defined kappa: the means are undefined.",
            UndefinedAgreementWarning, stacklevel=2,
        )

    kappa = np.full((n_ann, n_ann), np.nan)
    a, b = np.divmod(eligible, n_ann)
    kappa[a, b] = kappa_p
    kappa[b, a] = kappa_p

    # The items the bootstrap resamples: those labeled by both annotators of at least
    # one eligible pair.
    in_pair = np.zeros(n_ann, dtype=bool)
    in_pair[a] = in_pair[b] = True
    entering = _items_of_pairs(item, ann, eligible, codes[shared < min_overlap], n_ann)
    w_lo = w_hi = u_lo = u_hi = np.nan
    n_boot_undef = n_bootstrap if n_p == n_undefined else 0
    if n_bootstrap and n_p > n_undefined:
        boot_w, boot_u = _bootstrap_means(item, ann, label, in_pair, entering, eligible, n_ann=n_ann,
                                          n_labels=n_labels, n_bootstrap=n_bootstrap, gen=gen)
        w_lo, w_hi, n_boot_undef = _interval(boot_w, float(weighted), confidence, interval)
        u_lo, u_hi, _ = _interval(boot_u, float(unweighted), confidence, interval)
    return PairwiseKappa(
        annotators=tuple(names), kappa=kappa, overlap=overlap,
        n_pairs=int(n_p - n_undefined), n_pairs_undefined=n_undefined,
        mean_weighted=float(weighted), mean_unweighted=float(unweighted),
        weighted_ci_low=w_lo, weighted_ci_high=w_hi, unweighted_ci_low=u_lo, unweighted_ci_high=u_hi,
        n_items=int(entering.size), min_overlap=int(min_overlap), confidence=confidence,
        interval=interval, n_bootstrap=n_bootstrap, n_bootstrap_undefined=n_boot_undef,
    )
