"""Combiners: from the labels of k raters to a prediction of another rater's label.

Every combiner here is *anonymous*: its prediction depends on the k labels only through
their count vector ``y`` (and, for the ABC, on the rest of the data set). Predictions are
(P, L) arrays of probabilities; a hard combiner's row is uniform over its tied winners,
which is the expectation of breaking the tie at random.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from auditor.stats.equivalence._inputs import row_histogram

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

    @staticmethod
    def sequence_log_prob(owner: np.ndarray, z: np.ndarray) -> np.ndarray:
        """log P_owner(z) row by row; ``owner`` and ``z`` are (M, L)."""
        n = owner.sum(axis=1)
        j = z.sum(axis=1)
        # j > n implies some z_l > owner_l: probability 0, not -inf minus -inf.
        return np.where(j > n, -np.inf, _log_falling(owner, z).sum(axis=1) - _log_falling(n, np.minimum(j, n)))

    def total(self, z: np.ndarray) -> np.ndarray:
        """Σ_items P_item(z) for each row of ``z`` (M, L), in chunks of bounded memory."""
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

    def predict(self, y: np.ndarray, own: np.ndarray) -> np.ndarray:
        """Predictions (P, L) for sub-counts ``y`` of items with full counts ``own``."""
        p, n_labels = y.shape
        z = (y[:, None, :] + np.eye(n_labels, dtype=np.int64)[None]).reshape(-1, n_labels)
        uniq, inv, _ = row_histogram(z)
        total = self.total(uniq)[inv.reshape(-1)].reshape(p, n_labels)
        own_p = np.exp(self.sequence_log_prob(np.repeat(own, n_labels, axis=0), z)).reshape(p, n_labels)
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
