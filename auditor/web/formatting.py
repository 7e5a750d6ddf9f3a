"""Template filters for numbers, confidences, equivalences and verdicts.

Plain Python (not Jinja macros): a 100-release table calls them thousands of times.
"""

from __future__ import annotations

import math

from flask import Flask
from markupsafe import Markup, escape

__all__ = ["init_app"]

_NA = Markup('<span class="na">–</span>')


def num(x, digits: int = 3) -> Markup | str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return _NA
    return f"{x:.{digits}f}"


def confidence(s) -> Markup | str:
    """Theorem 7's S: a negative value is "not certified", never a number to read as a probability."""
    if s is None:
        return _NA
    if s < 0:
        return Markup('<span class="neg" title="S = {:.4f}">&lt; 0 (not certified)</span>').format(s)
    return f"{s:.4f}"


def equivalence(curve) -> Markup | str:
    if curve is None:
        return _NA
    if curve.equivalence_note:
        return str(curve.equivalence_note)
    if curve.equivalence is None:
        return _NA
    out = escape(f"{curve.equivalence:.2f}")
    if curve.equivalence_low is not None and curve.equivalence_high is not None:
        out += Markup(" <small>[{:.2f}, {:.2f}]</small>").format(curve.equivalence_low, curve.equivalence_high)
    return out


_METHOD_LABELS = {
    "anytime": ("anytime", "anytime verdict: valid however often the audits re-check it"),
    "oms": ("paper, OMS", "the paper's Theorem 7 with OMS: valid for one look at a fixed number of items"),
    "hms": ("paper, HMS", "the paper's Theorem 7 with HMS: valid for one look at a fixed number of items"),
}


def verdict(cert) -> Markup:
    """The badge, saying which verdict it shows (anytime or the paper's) and with which bound."""
    if cert is None:
        return Markup('<span class="badge none">not audited</span>')
    short, long = _METHOD_LABELS.get(getattr(cert, "method", None) or "oms", _METHOD_LABELS["oms"])
    if cert.certified:
        return Markup('<span class="badge ok" title="certified with {0}; {2}">certified ({0}, {1})</span>').format(
            cert.certified_with, short, long)
    return Markup('<span class="badge no" title="{2}">{0} ({1})</span>').format(cert.verdict, short, long)


def init_app(app: Flask) -> None:
    app.add_template_filter(num)
    app.add_template_filter(confidence)
    app.add_template_filter(equivalence)
    app.add_template_filter(verdict)
