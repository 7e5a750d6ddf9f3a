"""Drawing a survey power curve with its intervals and a classifier's equivalence.

Uses matplotlib's object API (``Figure``) only: importing this module, or calling
:func:`plot_power_curve`, neither imports ``pyplot`` nor changes the backend or any rc
setting, so it is safe in a web worker.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from auditor.stats.equivalence.curve import PowerCurve, SurveyEquivalence
from auditor.stats.validation import StatsInputError

__all__ = ["plot_power_curve"]

_Y_LABELS = {
    "agreement": "agreement with a reference rater",
    "cross_entropy": "cross-entropy score (bits)",
    "f1": "F1 against a reference rater",
    "auc": "AUC against a reference rater",
    "pearson": "correlation with a reference rater",
    "dmi": "DMI with a reference rater",
}


def plot_power_curve(curve: PowerCurve, *, equivalence: SurveyEquivalence | None = None, ax=None,
                     center: bool = False, title: str | None = None, label: str = "k raters",
                     classifier_label: str = "classifier", path: str | Path | None = None):
    """Draw c_k with its bootstrap intervals, and optionally a classifier's equivalence.

    As in the paper's figures: the power curve as points with error bars joined by a
    line; the classifier's score as a horizontal line with its interval shaded; a drop
    line at the survey equivalence, labelled with its value (or "< 0" / "> K").

    Parameters
    ----------
    curve : PowerCurve
    equivalence : SurveyEquivalence, optional
        Adds the classifier's score and equivalence (its ``curve`` is used if
        ``curve`` is None).
    ax : matplotlib Axes, optional
        Draw into these axes; by default a new ``Figure`` (Agg canvas) is made.
    center : bool, default False
        Plot c_k − c_0 ("information gain", the paper's Figure 5).
    title, label, classifier_label : str
    path : str or Path, optional
        Save the figure there; the format follows the suffix (``.png``, ``.svg``, ``.pdf``).

    Returns
    -------
    matplotlib.figure.Figure
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'auditor[plot]'") from None

    if curve is None:
        if equivalence is None:
            raise StatsInputError("`curve` or `equivalence` is required.")
        curve = equivalence.curve
    if not isinstance(curve, PowerCurve):
        raise StatsInputError(f"`curve` must be a PowerCurve; got {type(curve).__name__}.")
    if ax is None:
        fig = Figure(figsize=(6.4, 4.8))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    shift = curve.mean[0] if center else 0.0
    mean = curve.mean - shift
    has_ci = np.isfinite(curve.ci_low).any()
    if has_ci:
        yerr = np.vstack([mean - (curve.ci_low - shift), (curve.ci_high - shift) - mean])
        ax.errorbar(curve.k, mean, yerr=np.clip(yerr, 0, None), fmt="o-", color="black", capsize=3,
                    label=label)
    else:
        ax.plot(curve.k, mean, "o-", color="black", label=label)
    if equivalence is not None:
        score = equivalence.classifier_score
        y = score.value - shift
        ax.axhline(y, color="tab:red", linewidth=1.5, label=classifier_label)
        if np.isfinite(score.ci_low) and np.isfinite(score.ci_high):
            ax.axhspan(score.ci_low - shift, score.ci_high - shift, color="tab:red", alpha=0.12)
        value = equivalence.value
        if isinstance(value, str):
            x_text = 0 if value.startswith("<") else curve.k_max
            ax.annotate(f"equivalence {value}", (x_text, y), textcoords="offset points", xytext=(4, 6),
                        color="tab:red")
        else:
            ax.vlines(value, ax.get_ylim()[0], y, colors="tab:red", linestyles="dashed")
            ax.annotate(f"{value:.2f}", (value, y), textcoords="offset points", xytext=(4, 6),
                        color="tab:red")
    ax.set_xlabel("number of raters k")
    ylabel = _Y_LABELS.get(curve.scorer, curve.scorer)
    ax.set_ylabel(f"gain over c_0: {ylabel}" if center else ylabel)
    ax.set_xticks(curve.k)
    ax.set_title(title if title is not None else f"{curve.combiner} + {curve.scorer}")
    ax.legend(loc="lower right")
    if path is not None:
        fig.savefig(path, bbox_inches="tight")
    return fig
