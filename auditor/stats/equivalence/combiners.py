"""Combiners: from the labels of k raters to a prediction of another rater's label.

Every combiner here is *anonymous*: its prediction depends on the k labels only through
their count vector ``y`` (and, for the ABC, on the rest of the data set). Predictions are
(P, L) arrays of probabilities; a hard combiner's row is uniform over its tied winners,
which is the expectation of breaking the tie at random.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from auditor.stats.equivalence._inputs import row_histogram, sub_counts

#: The paper's implementation moves soft predictions of 0 or 1 to 0.02 / 0.98 before
#: scoring them with cross-entropy (Resnick et al., §3.2), then renormalises.
DEFAULT_CLIP = 0.02


def tie_uniform(scores: np.ndarray) -> np.ndarray:
    """Rows uniform over the arg-max set of ``scores`` (random tie-break, in expectation)."""
    top = scores.max(axis=1, keepdims=True)
    winners = np.isclose(scores, top, rtol=0.0, atol=1e-12 * max(1.0, float(np.abs(top).max(initial=0.0))))
    return winners / winners.sum(axis=1, keepdims=True)


def clip_probabilities(probs: np.ndarray, clip: float) -> np.ndarray:
    """Clip to ``[clip, 1 - clip]`` and renormalise (the reference package's rule)."""
    if clip <= 0:
        return probs
    out = np.clip(probs, clip, 1.0 - clip)
    return out / out.sum(axis=1, keepdims=True)


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
        self._table: tuple[int, np.ndarray, np.ndarray] | None = None

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
        size = int(z.sum(axis=1).max(initial=0))
        table = self._sub_vector_table(size)
        if table is None:
            return self._total_direct(z)
        radix, keys, values = table
        out = np.zeros(z.shape[0])
        inside = (z < radix[None, :]).all(axis=1)  # z_l above every v_l: no item has it
        code = self._encode(z[inside], radix)
        pos = np.minimum(np.searchsorted(keys, code), keys.shape[0] - 1)
        found = keys[pos] == code
        out[np.flatnonzero(inside)[found]] = values[pos[found]]
        return out

    #: Largest number of (vector, sub-vector) pairs tabulated; beyond it, the direct sum.
    TABLE_BUDGET = 400_000_000
    _BLOCK_PAIRS = 1_000_000

    @staticmethod
    def _encode(z: np.ndarray, radix: np.ndarray) -> np.ndarray:
        place = np.concatenate([[1], np.cumprod(radix[:-1])]).astype(np.int64)
        return z.astype(np.int64) @ place

    def _sub_vector_table(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        if self._table is not None and self._table[0] >= size:
            return self._table[1:]
        radix = self.unique.max(axis=0) + 1
        if float(np.prod(radix.astype(float))) >= 2.0 ** 62:
            return None  # the mixed-radix key would overflow: many labels with large counts
        top = np.minimum(self.n, size)
        with np.errstate(over="ignore"):
            bound = np.minimum(np.prod(self.unique.astype(float) + 1.0, axis=1),
                               np.exp(gammaln(top + self.unique.shape[1] + 1.0) - gammaln(top + 1.0)
                                      - gammaln(self.unique.shape[1] + 1.0)))
        if float(bound.sum()) > self.TABLE_BUDGET:
            return None
        # In blocks of about _BLOCK_PAIRS (vector, sub-vector) pairs: bounded working memory.
        cum = np.cumsum(bound)
        parts_k, parts_v, start = [], [], 0
        while start < len(bound):
            end = max(start + 1, int(np.searchsorted(cum, cum[start] - bound[start] + self._BLOCK_PAIRS,
                                                     side="right")))
            block = np.arange(start, end)
            start = end
            owner, sub = sub_counts(self.unique[block], top[block])
            owner = block[owner]
            v = self.unique[owner]
            n = self.n[owner]
            logp = (gammaln(v + 1.0) - gammaln(v - sub + 1.0)).sum(axis=1) \
                - (gammaln(n + 1.0) - gammaln(n - sub.sum(axis=1) + 1.0))
            k, inverse = np.unique(self._encode(sub, radix), return_inverse=True)
            parts_k.append(k)
            parts_v.append(np.bincount(inverse.reshape(-1), weights=self.weight[owner] * np.exp(logp),
                                       minlength=k.shape[0]))
            del owner, sub, v, n, logp, inverse
        keys, inverse = np.unique(np.concatenate(parts_k), return_inverse=True)
        values = np.bincount(inverse.reshape(-1), weights=np.concatenate(parts_v), minlength=keys.shape[0])
        self._table = (size, radix, keys, values)
        return radix, keys, values

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

    def _totals_next(self, y: np.ndarray) -> np.ndarray | None:
        """``total(y + e_l)`` for every row of ``y`` and label l, (P, L), from the table by
        key arithmetic (the key of y + e_l is key(y) + place_l): no (P·L, L) array."""
        table = self._sub_vector_table(int(y.sum(axis=1).max(initial=0)) + 1)
        if table is None:
            return None
        radix, keys, values = table
        place = np.concatenate([[1], np.cumprod(radix[:-1])]).astype(np.int64)
        codes = (np.where(y < radix[None, :], y, 0).astype(np.int64) @ place)[:, None] + place[None, :]
        inside = (y < radix[None, :]).all(axis=1)[:, None] & (y + 1 < radix[None, :])
        out = np.zeros(y.shape)
        wanted = codes[inside]
        pos = np.minimum(np.searchsorted(keys, wanted), keys.shape[0] - 1)
        found = keys[pos] == wanted
        hits = np.zeros(wanted.shape)
        hits[found] = values[pos[found]]
        out[inside] = hits
        return out

    def predict(self, y: np.ndarray, own: np.ndarray) -> np.ndarray:
        """Predictions (P, L) for sub-counts ``y ≤ own`` of items with full counts ``own``."""
        p, n_labels = y.shape
        total = self._totals_next(y)
        if total is None:
            z = (y[:, None, :] + np.eye(n_labels, dtype=np.int64)[None]).reshape(-1, n_labels)
            uniq, inv, _ = row_histogram(z)
            total = self.total(uniq)[inv.reshape(-1)].reshape(p, n_labels)
        # P_own(y + e_l) = P_own(y) (own_l − y_l) / (|own| − |y|): falling factorials one step on.
        left = own.sum(axis=1) - y.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            own_p = np.where(left[:, None] > 0, np.exp(self.sequence_log_prob(own, y))[:, None] * (own - y)
                             / np.maximum(left, 1)[:, None], 0.0)
        num = total - own_p
        # Rounding in the subtraction must not turn "no other item" into a tiny probability.
        num[num <= 1e-12 * total] = 0.0
        norm = num.sum(axis=1, keepdims=True)
        empty = norm[:, 0] <= 0
        if empty.any():
            # No other item can have produced these labels: nothing was learned, predict uniformly.
            num[empty] = 1.0
            norm[empty] = n_labels
        return num / norm


def predict(combiner: str, y: np.ndarray, own: np.ndarray, *, prior: np.ndarray,
            model: ABCModel | None, clip: float) -> np.ndarray:
    """Predictions (P, L) of ``combiner`` from sub-counts ``y`` (P, L).

    ``own`` is each row's item's full count vector (used by the ABC only); ``prior`` the
    frequency combiner's prediction from no labels (the overall label frequencies).
    """
    if combiner in ("majority", "plurality"):
        return tie_uniform(y.astype(float))
    if combiner == "frequency":
        k = y.sum(axis=1, keepdims=True)
        out = np.where(k > 0, y / np.maximum(k, 1), prior[None, :])
        return clip_probabilities(out, clip)
    if combiner == "abc":
        return clip_probabilities(model.predict(y, own), clip)
    raise ValueError(combiner)  # pragma: no cover - names are validated upstream
