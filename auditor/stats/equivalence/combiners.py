"""Combiners: from the labels of k raters to a prediction of another rater's label.

Every combiner here is *anonymous*: its prediction depends on the k labels only through
their count vector ``y`` (and, for the ABC, on the rest of the data set). Predictions are
(P, L) arrays of probabilities; a hard combiner's row is uniform over its tied winners,
which is the expectation of breaking the tie at random.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from auditor.stats.counts import row_histogram
from auditor.stats.equivalence._inputs import sub_counts_columns

#: The paper's implementation moves soft predictions of 0 or 1 to 0.02 / 0.98 before
#: scoring them with cross-entropy (Resnick et al., §3.2), then renormalises.
DEFAULT_CLIP = 0.02


def tie_uniform(scores: np.ndarray) -> np.ndarray:
    """Rows uniform over the arg-max set of ``scores`` (random tie-break, in expectation)."""
    return tie_uniform_columns(np.ascontiguousarray(scores.T)).T


def tie_uniform_columns(scores: np.ndarray) -> np.ndarray:
    """:func:`tie_uniform` on column-major ``scores`` (L, P): one row per label."""
    top = scores.max(axis=0)
    if np.issubdtype(scores.dtype, np.integer):
        winners = scores == top
    else:
        atol = 1e-12 * max(1.0, float(np.abs(top).max(initial=0.0)))
        winners = np.abs(scores - top) <= atol
    return winners / winners.sum(axis=0)


def clip_probabilities(probs: np.ndarray, clip: float, axis: int = 1, *, inplace: bool = False) -> np.ndarray:
    """Clip to ``[clip, 1 - clip]`` and renormalise along ``axis`` (the reference package's rule);
    ``inplace`` overwrites ``probs`` (a float array the caller owns)."""
    if clip <= 0:
        return probs
    out = np.clip(probs, clip, 1.0 - clip, out=probs if inplace else None)
    out /= out.sum(axis=axis, keepdims=True)
    return out


def _log_falling(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """log of n (n-1) ... (n-k+1); -inf where k > n."""
    with np.errstate(invalid="ignore"):
        out = gammaln(n + 1.0) - gammaln(np.maximum(n - k, 0) + 1.0)
    return np.where(k > n, -np.inf, out)


class ABCModel:
    """The Anonymous Bayesian Combiner's learner (Resnick et al., Algorithms 5–6).

    Holds the histogram of the data set's count vectors. For observed sub-counts ``y``
    of an item whose full count vector is ``m``, the prediction is

        p_l ∝ Σ_items P_item(y + e_l) − P_m(y + e_l),

    where ``P_v(z) = Π_l (v_l)_{z_l} / (|v|)_{|z|}`` is the probability that |z| raters
    drawn without replacement from an item with counts ``v`` give one particular label
    sequence with counts ``z`` (falling factorials; zero when ``z`` exceeds ``v``). The
    subtracted term leaves the predicted item out of what the combiner learns; the
    normalisation over l makes the paper's denominator (and its item count) cancel.
    """

    def __init__(self, unique: np.ndarray, multiplicity: np.ndarray):
        self.unique = np.asarray(unique, dtype=np.int64)
        self.weight = np.asarray(multiplicity, dtype=float)
        self.n = self.unique.sum(axis=1)
        # log k! for every count that occurs (and one more).
        self._lf = gammaln(np.arange(int(self.n.max(initial=0)) + 2, dtype=float) + 1.0)
        self._radix = self.unique.max(axis=0) + 1
        self._place = np.concatenate([[1], np.cumprod(self._radix[:-1])]).astype(np.int64)
        self._table: tuple[int, np.ndarray | None, np.ndarray] | None = None

    @staticmethod
    def sequence_log_prob(owner: np.ndarray, z: np.ndarray) -> np.ndarray:
        """log P_owner(z) row by row; ``owner`` and ``z`` are (M, L)."""
        n = owner.sum(axis=1)
        j = z.sum(axis=1)
        # j > n implies some z_l > owner_l: probability 0, not -inf minus -inf.
        return np.where(j > n, -np.inf, _log_falling(owner, z).sum(axis=1) - _log_falling(n, np.minimum(j, n)))

    def total(self, z: np.ndarray) -> np.ndarray:
        """Σ_items P_item(z) for each row of ``z`` (M, L).

        Only the items with ``v ≥ z`` contribute. The sum is tabulated once per model by
        enumerating, for each distinct count vector v, its own sub-vectors z ≤ v (up to
        the largest |z| asked), weighting each by w_v P_v(z) and adding equal z's; a query
        is then a lookup. The work is Σ_v #{z ≤ v}, instead of (queries × distinct
        vectors × labels) for comparing every query with every vector (which is kept,
        :meth:`_total_direct`, for the rare tables too large to hold).
        """
        z = np.asarray(z, dtype=np.int64)
        if not self._tabulate(np.unique(z.sum(axis=1))):
            return self._total_direct(z)
        inside = (z < self._radix[None, :]).all(axis=1)  # z_l above every v_l: no item has it
        out = np.zeros(z.shape[0])
        out[inside] = self._lookup(z[inside] @ self._place)
        return out

    #: Largest number of (vector, sub-vector) pairs tabulated; beyond it, the direct sum.
    TABLE_BUDGET = 400_000_000
    #: Largest mixed-radix key space held as a dense array (8 bytes per possible key);
    #: beyond it, the table keeps the sorted keys that occur.
    DENSE_KEYS = 1 << 23
    _BLOCK_PAIRS = 250_000

    def _lookup(self, codes: np.ndarray, *, ascending: bool = False) -> np.ndarray:
        """Table values at ``codes`` (0 where a code is absent). A binary search over
        millions of keys is fast only when consecutive queries are near each other:
        ``ascending`` says the codes are already sorted; otherwise they are sorted here."""
        _, keys, values = self._table
        if keys is None:
            return values[codes]
        if not ascending:
            order = np.argsort(codes, kind="stable")
            out = np.empty(codes.shape[0])
            out[order] = self._lookup(codes[order], ascending=True)
            return out
        pos = np.minimum(np.searchsorted(keys, codes), keys.shape[0] - 1)
        return np.where(keys[pos] == codes, values[pos], 0.0)

    def prepare(self, sizes) -> None:
        """Tabulate the sub-vectors of these sizes |z| ahead of the predictions that need
        them (the exact path: one more than each k of the curve)."""
        self._tabulate(np.unique(np.asarray(sizes, dtype=np.int64)))

    def _tabulate(self, sizes: np.ndarray) -> bool:
        """Build the table of Σ_v w_v P_v(z) over sub-vectors z with |z| in ``sizes`` (sorted;
        with those of a table built before), or find it built (False: too large to hold;
        the direct sum serves)."""
        import pandas as pd

        if self._table is not None:
            if np.isin(sizes, self._table[0]).all():
                return True
            sizes = np.union1d(sizes, self._table[0])
        size = int(sizes.max(initial=0))
        radix = self._radix
        space = float(np.prod(radix.astype(float)))
        if space >= 2.0 ** 62:
            return False  # the mixed-radix key would overflow: many labels with large counts
        top = np.minimum(self.n, size)
        n_labels = self.unique.shape[1]
        with np.errstate(over="ignore"):
            bound = np.minimum(np.prod(self.unique.astype(float) + 1.0, axis=1),
                               np.exp(gammaln(top + n_labels + 1.0) - gammaln(top + 1.0) - gammaln(n_labels + 1.0)))
        if float(bound.sum()) > self.TABLE_BUDGET:
            return False
        dense = space <= self.DENSE_KEYS
        lf = self._lf
        # log P_v(z) = Σ_l log v_l! − log(v_l − z_l)! − (log n! − log(n − |z|)!)
        key_log = lf[self.unique].sum(axis=1) - lf[self.n]
        cols = np.ascontiguousarray(self.unique.T)
        values = np.zeros(int(space)) if dense else None
        parts_k, parts_v = [], []
        # In blocks of about _BLOCK_PAIRS (vector, sub-vector) pairs: bounded working memory.
        cum = np.cumsum(bound)
        start = 0
        while start < len(bound):
            end = max(start + 1, int(np.searchsorted(cum, cum[start] - bound[start] + self._BLOCK_PAIRS,
                                                     side="right")))
            block = np.arange(start, end)
            start = end
            owner, sub = sub_counts_columns(self.unique[block], top[block], sizes)
            owner = block[owner]
            logp = key_log[owner] + lf[self.n[owner] - sub.sum(axis=0)]
            code = np.zeros(owner.shape[0], dtype=np.int64)
            for lab in range(n_labels):
                logp -= lf[cols[lab, owner] - sub[lab]]
                code += sub[lab] * self._place[lab]
            weights = self.weight[owner] * np.exp(logp)
            if dense:
                values += np.bincount(code, weights=weights, minlength=values.shape[0])
            else:
                inverse, k = pd.factorize(code)  # hashing: linear in the pairs; sorted below
                parts_k.append(np.asarray(k, dtype=np.int64))
                parts_v.append(np.bincount(inverse, weights=weights, minlength=k.shape[0]))
        if dense:
            self._table = (sizes, None, values)
        else:
            inverse, keys = pd.factorize(np.concatenate(parts_k), sort=True)
            keys = np.asarray(keys, dtype=np.int64)
            self._table = (sizes, keys, np.bincount(inverse, weights=np.concatenate(parts_v),
                                                   minlength=keys.shape[0]))
        return True

    def _total_direct(self, z: np.ndarray) -> np.ndarray:
        """Σ_items P_item(z) by comparing every row of ``z`` with every count vector, in
        chunks of bounded memory."""
        m, n_labels = z.shape
        u = self.unique.shape[0]
        out = np.empty(m)
        step = max(1, int(4_000_000 // max(1, u * n_labels)))
        lf_n = gammaln(self.n + 1.0)
        lf_u = gammaln(self.unique + 1.0)
        for start in range(0, m, step):
            zz = z[start:start + step]
            diff = self.unique[None, :, :] - zz[:, None, :]
            with np.errstate(invalid="ignore"):
                logp = (lf_u[None] - gammaln(np.maximum(diff, 0) + 1.0)).sum(axis=2)
                rest = self.n[None, :] - zz.sum(axis=1)[:, None]
                logp -= lf_n[None, :] - gammaln(np.maximum(rest, 0) + 1.0)
            ok = (diff >= 0).all(axis=2)
            prob = np.where(ok, np.exp(np.where(ok, logp, 0.0)), 0.0)
            out[start:start + step] = prob @ self.weight
        return out

    def _totals_next(self, y: np.ndarray) -> np.ndarray:
        """``total(y + e_l)`` for every column of ``y`` (L, P) and label l, as (L, P): from the
        table by key arithmetic (the key of y + e_l is key(y) + place_l).

        The P columns repeat a much smaller set of sub-vectors (every item that has them
        shares them), so the keys are factorised first (a hash pass) and the table is
        searched once per distinct sub-vector and label; the result is gathered back.
        """
        import pandas as pd

        n_labels, p = y.shape
        if not self._tabulate(np.unique(y.sum(axis=0)) + 1):
            z = (y.T[:, None, :] + np.eye(n_labels, dtype=np.int64)[None]).reshape(-1, n_labels)
            uniq, _, inv = row_histogram(z)
            return np.ascontiguousarray(self.total(uniq)[inv.reshape(-1)].reshape(p, n_labels).T)
        radix = self._radix
        inside = np.ones(p, dtype=bool)
        code = np.zeros(p, dtype=np.int64)
        for lab in range(n_labels):
            inside &= y[lab] < radix[lab]
            code += np.minimum(y[lab], radix[lab] - 1) * self._place[lab]
        code[~inside] = -1  # a count above every item's: no y + e_l is in the table
        which, distinct = pd.factorize(code, sort=True)
        distinct = np.asarray(distinct, dtype=np.int64)
        found = distinct >= 0
        digits = np.zeros(distinct.shape[0], dtype=np.int64)
        values = np.zeros((n_labels, distinct.shape[0]))
        for lab in range(n_labels):
            np.floor_divide(distinct, self._place[lab], out=digits)
            ok = found & (digits % radix[lab] + 1 < radix[lab])
            # ``distinct`` is sorted, so the keys + place_l are ascending too.
            values[lab, ok] = self._lookup(distinct[ok] + self._place[lab], ascending=True)
        return values[:, which]

    def predict(self, y: np.ndarray, own: np.ndarray) -> np.ndarray:
        """Predictions (P, L) for sub-counts ``y ≤ own`` of items with full counts ``own``."""
        return self.predict_columns(np.ascontiguousarray(y.T), np.ascontiguousarray(own.T)).T

    def predict_columns(self, y: np.ndarray, own: np.ndarray | None, *, rest: np.ndarray | None = None,
                        log_own: np.ndarray | None = None, total: np.ndarray | None = None,
                        n_own: np.ndarray | None = None) -> np.ndarray:
        """:meth:`predict` column-major: ``y``, ``own`` and the result are (L, P).

        ``rest`` (``own − y``), ``log_own`` (log P_own(y)) and ``total`` (``total(y + e_l)``,
        (L, P); overwritten) may be passed by a caller that has them already (the exact path
        computes the first two for its hypergeometric weights, and may sum the third); with
        ``rest``, ``log_own`` and ``n_own`` (= |own|), ``own`` is not needed.
        """
        n_labels = y.shape[0]
        if total is None:
            total = self._totals_next(y)
        if n_own is None:
            n_own = own.sum(axis=0)
        left = n_own - y.sum(axis=0)
        if rest is None:
            rest = own - y
        if log_own is None:
            lf = self._lf if int(n_own.max(initial=0)) < self._lf.shape[0] else \
                gammaln(np.arange(int(n_own.max()) + 2, dtype=float) + 1.0)
            log_own = -(lf[n_own] - lf[np.maximum(left, 0)])
            for lab in range(n_labels):
                log_own += lf[own[lab]] - lf[np.maximum(rest[lab], 0)]
        # P_own(y + e_l) = P_own(y) (own_l − y_l) / (|own| − |y|): falling factorials one step on.
        step = np.where(left > 0, np.exp(log_own) / np.maximum(left, 1), 0.0)
        return abc_from_totals(total, rest, step)


def abc_from_totals(total: np.ndarray, rest: np.ndarray, step: np.ndarray) -> np.ndarray:
    """The ABC's predictions (L, P) from the data set's sums ``total`` = T(y + e_l) (L, P;
    overwritten), the item's own remaining counts ``rest`` = own − y and ``step`` =
    P_own(y) / (|own| − |y|) (0 when nothing is left): the item's own term
    P_own(y + e_l) = rest_l · step is taken out of the sums (leave one out), the rest
    normalised."""
    n_labels = total.shape[0]
    num = np.multiply(rest, step, dtype=float)
    np.subtract(total, num, out=num)
    # Rounding in the subtraction must not turn "no other item" into a tiny probability.
    total *= 1e-12
    np.copyto(num, 0.0, where=num <= total)
    norm = num.sum(axis=0)
    empty = norm <= 0
    if empty.any():
        # No other item can have produced these labels: nothing was learned, predict uniformly.
        num[:, empty] = 1.0
        norm[empty] = n_labels
    num /= norm
    return num


def predict(combiner: str, y: np.ndarray, own: np.ndarray, *, prior: np.ndarray,
            model: ABCModel | None, clip: float) -> np.ndarray:
    """Predictions (P, L) of ``combiner`` from sub-counts ``y`` (P, L).

    ``own`` is each row's item's full count vector (used by the ABC only); ``prior`` the
    frequency combiner's prediction from no labels (the overall label frequencies).
    """
    return predict_columns(combiner, np.ascontiguousarray(y.T), np.ascontiguousarray(own.T), prior=prior,
                           model=model, clip=clip).T


def predict_columns(combiner: str, y: np.ndarray, own: np.ndarray | None, *, prior: np.ndarray,
                    model: ABCModel | None, clip: float, rest: np.ndarray | None = None,
                    log_own: np.ndarray | None = None, total: np.ndarray | None = None,
                    n_own: np.ndarray | None = None) -> np.ndarray:
    """:func:`predict` column-major: ``y``, ``own`` and the predictions are (L, P).

    ``rest`` = own − y, ``log_own`` = log P_own(y) and ``total`` (the ABC's table sums at
    y + e_l) save the ABC recomputing them.
    """
    if combiner in ("majority", "plurality"):
        return tie_uniform_columns(y)
    if combiner == "frequency":
        k = y.sum(axis=0)
        out = np.where(k > 0, y / np.maximum(k, 1), prior[:, None])
        return clip_probabilities(out, clip, axis=0, inplace=True)
    if combiner == "abc":
        return clip_probabilities(model.predict_columns(y, own, rest=rest, log_own=log_own, total=total,
                                                        n_own=n_own),
                                  clip, axis=0, inplace=True)
    raise ValueError(combiner)  # pragma: no cover - names are validated upstream
