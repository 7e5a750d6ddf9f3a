"""Template filters for numbers, confidences, equivalences, verdicts and weekly quality.

Plain Python (not Jinja macros): a 100-release table calls them thousands of times.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from flask import Flask, url_for
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
    """The survey equivalence with its bootstrap 95% interval; read off a curve drawn by
    Monte Carlo, also its Monte Carlo standard error (or that the draws could not pin it)."""
    if curve is None:
        return _NA
    if curve.equivalence_note:
        return str(curve.equivalence_note)
    if curve.equivalence is None:
        return _NA
    out = escape(f"{curve.equivalence:.2f}")
    if curve.equivalence_low is not None and curve.equivalence_high is not None:
        out += Markup(" <small>[{:.2f}, {:.2f}]</small>").format(curve.equivalence_low, curve.equivalence_high)
    return out + _mc(curve.method, curve.equivalence_mc_error, "curve was")


def _mc(method, error, drawn: str) -> Markup | str:
    """The Monte Carlo error of a value read off drawn curves (nothing for an exact one)."""
    if method != "monte_carlo":
        return ""
    if error is not None and math.isfinite(error):
        return Markup(' <small class="mc" title="Monte Carlo standard error: the {} drawn, not computed '
                      'exactly">MC ±{:.2g}</small>').format(drawn, error)
    return Markup(' <small class="mc" title="the {} drawn by Monte Carlo and the crossing could lie outside '
                  'it: the draws do not pin this value">MC error undetermined</small>').format(drawn)


def expert_equivalence(report) -> Markup | str:
    """A vendor's expert equivalence (a report row or its dictionary), with its Monte Carlo
    error when its curves were drawn."""
    get = report.get if isinstance(report, dict) else (lambda k, d=None: getattr(report, k, d))
    value = None if report is None else get("expert_equivalence")
    if value is None or not math.isfinite(value):
        return _NA
    return escape(f"{value:.2f}") + _mc(get("expert_equivalence_method"), get("expert_equivalence_mc_error"),
                                        "curves were")


_METHOD_LABELS = {
    "anytime": ("anytime", "anytime verdict: valid however often the audits re-check it"),
    "anytime-fan": ("anytime, pair", "anytime verdict from one sequence per bound (the earlier, weaker form): "
                                     "valid however often the audits re-check it"),
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


def week(when) -> Markup | str:
    """The week a weekly window (or a change) starts: its Monday, as a date."""
    if when is None:
        return _NA
    return f"{when:%Y-%m-%d}"


def windowed(window) -> Markup | str:
    """A weekly window's value with its 95% interval."""
    if not window or window.value is None:
        return _NA
    out = escape(f"{window.value:.3f}")
    if window.low is not None and window.high is not None:
        out += Markup(" <small>[{:.3f}, {:.3f}]</small>").format(window.low, window.high)
    return out


def delta(x) -> Markup:
    """A signed difference (a true minus sign), marked up or down."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return _NA
    if abs(x) < 0.0005:
        return Markup('<span class="delta flat">±0.000</span>')
    return Markup('<span class="delta {}">{}{:.3f}</span>').format("up" if x > 0 else "down",
                                                                     "+" if x > 0 else "\u2212", abs(x))


_METRIC_WORDS = {"agreement": "agreement with the others", "gold_accuracy": "accuracy on gold items"}


def change_badge(change) -> Markup:
    """The detector's change: a badge naming its direction and the week it started; the
    intervals before and after and the evidence in its title."""
    if change is None:
        return _NA
    what = _METRIC_WORDS.get(change.metric, change.metric)
    title = (f"{what} {'dropped' if change.direction == 'drop' else 'rose'} from {change.before:.3f} "
             f"[{change.before_low:.3f}, {change.before_high:.3f}] to {change.after:.3f} "
             f"[{change.after_low:.3f}, {change.after_high:.3f}]; found with the data up to "
             f"{change.detected_at:%Y-%m-%d}")
    if change.evidence is not None:
        title += f"; evidence (yearly false-alarm rate at which it still fires) {change.evidence:.2g}"
    label = f"{'drop' if change.direction == 'drop' else 'rise'} since {change.start:%Y-%m-%d}"
    if change.metric == "gold_accuracy":
        label += " (gold)"
    return Markup('<span class="badge change {}" title="{}"><span class="nowrap">change detected:</span> '
                  '<span class="nowrap">{}</span></span>').format("no" if change.direction == "drop" else "ok",
                                                                  title, label)


def interval(low, high, digits: int = 3) -> Markup | str:
    """`` [low, high]`` (small), or nothing when either end is unknown."""
    if low is None or high is None or not all(math.isfinite(x) for x in (low, high)):
        return ""
    return Markup(" <small>[{}, {}]</small>").format(f"{low:.{digits}f}", f"{high:.{digits}f}")


def against(s, threshold) -> Markup:
    """A confidence S beside the threshold the verdict compares it with: "0.4213 < 0.95"."""
    if s is None:
        return _NA
    if threshold is None:
        return Markup("{}").format(confidence(s))
    title = f"S = {s:.4f}; the verdict certifies at S \u2265 {threshold}"
    if s < 0:
        return Markup('<span class="neg" title="{}">&lt; 0, needs \u2265 {}</span>').format(title, threshold)
    ok = s >= threshold
    return Markup('<span class="{}" title="{}">{:.4f} {} {}</span>').format(
        "pos" if ok else "neg", title, s, "\u2265" if ok else "<", threshold)


def seconds(x) -> Markup | str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return _NA
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def when(x) -> Markup | str:
    """A time stamp to the minute (UTC)."""
    if x is None:
        return _NA
    return f"{x:%Y-%m-%d %H:%M}"


def since(view) -> Markup:
    """Since when a release is certified (the first audit of its current run of certified verdicts)."""
    s = view.get("since") if view else None
    if not s:
        return _NA
    at = f"{s['at']:%Y-%m-%d %H:%M}" if s.get("at") else f"data version {s['data_version']}"
    return Markup('<span class="since">{} <small>(run <a href="{}">{}</a>)</small></span>').format(
        at, url_for("ui.audit_run", run_id=s["run_id"]), s["run_id"])


def best_value(b) -> Markup | str:
    """A BEST score in the pages' convention (cross-entropy in bits per label, a floor)."""
    if b is None or b.get("value") is None:
        return _NA
    out = escape(f"{b['value']:.3f}")
    if b.get("unit"):
        out += Markup(" <small>{}</small>").format(b["unit"])
    return out


def gap(g) -> Markup | str:
    """A release's distance to BEST: room left (positive), on the metric's own scale."""
    if not g:
        return _NA
    return Markup('<span title="BEST {} {:.3f}, this release {:.3f}{}">{:.3f}</span>').format(
        g["bound"], g["best"], g["score"], f" ({g['unit']})" if g["unit"] else "", g["gap"])


#: Rows of a chart's data table (its text alternative); a longer series says how many are left out.
CHART_TABLE_ROWS = 400


def _chart_x(spec: dict, x) -> str:
    kind = spec.get("x_type") or ("category" if spec.get("x_ticks") else "number")
    if kind == "time":
        when = datetime.fromtimestamp(x / 1000, tz=UTC)
        return f"{when:%Y-%m-%d}" if spec.get("x_unit_days") else f"{when:%Y-%m-%d %H:%M}"
    if kind == "category":
        ticks = spec.get("x_ticks") or []
        return str(ticks[int(x)]) if isinstance(x, int | float) and 0 <= int(x) < len(ticks) else str(x)
    return f"{x:g}" if isinstance(x, int | float) else str(x)


def _chart_value(y, low=None, high=None, digits: int = 3) -> str:
    if not isinstance(y, int | float) or not math.isfinite(y):
        return ""
    out = f"{y:.{digits}f}"
    if isinstance(low, int | float) and isinstance(high, int | float) and math.isfinite(low) and math.isfinite(high):
        out += f" [{low:.{digits}f}, {high:.{digits}f}]"
    return out


def chart_table(spec: dict) -> dict:
    """A chart's data as a table, its text alternative: one row per x value, one column per
    series (its value and 95% interval), then its markers, changes and reference lines."""
    digits = int(spec.get("y_digits") or 3)
    series = spec.get("series") or []
    by_x: dict = {}
    for i, s in enumerate(series):
        bands = {b[0]: b for b in s.get("band") or [] if len(b) == 3}
        for p in s.get("points") or []:
            if len(p) >= 2 and p[1] is not None:
                band = bands.get(p[0], (None, None, None))
                by_x.setdefault(p[0], {})[i] = _chart_value(p[1], band[1], band[2], digits)
    xs = sorted(x for x in by_x if isinstance(x, int | float))
    rows = [[_chart_x(spec, x), *(by_x[x].get(i, "") for i in range(len(series)))] for x in xs[:CHART_TABLE_ROWS]]
    notes = []
    for m in spec.get("markers") or []:
        at = "" if m.get("x") is None else f" at {spec.get('marker_x_word') or spec.get('x_label') or 'x'} {m['x']:.2f}"
        notes.append(f"{m.get('label')}: {_chart_value(m.get('y'), m.get('y_low'), m.get('y_high'), digits)}{at}"
                     + (f" ({m['note']})" if m.get("note") else ""))
    for b in spec.get("badges") or []:
        if b.get("y") is not None:
            notes.append(f"{_chart_x(spec, b['x'])}: {'certified' if b.get('certified') else 'not certified'}")
    for v in spec.get("vlines") or []:
        notes.append(f"{v.get('label')}" + (f" ({v['note']})" if v.get("note") else ""))
    for h in spec.get("hlines") or []:
        notes.append(str(h.get("label")))
    return {"x_label": spec.get("x_label") or "x", "names": [s.get("name") for s in series], "rows": rows,
            "left_out": max(0, len(xs) - CHART_TABLE_ROWS), "notes": notes}


def init_app(app: Flask) -> None:
    app.context_processor(lambda: {"has_endpoint": lambda name: name in app.view_functions})
    app.add_template_filter(interval)
    app.add_template_filter(chart_table)
    app.add_template_filter(against)
    app.add_template_filter(seconds)
    app.add_template_filter(when)
    app.add_template_filter(since)
    app.add_template_filter(best_value)
    app.add_template_filter(gap)
    app.add_template_filter(num)
    app.add_template_filter(confidence)
    app.add_template_filter(equivalence)
    app.add_template_filter(expert_equivalence)
    app.add_template_filter(verdict)
    app.add_template_filter(week)
    app.add_template_filter(windowed)
    app.add_template_filter(delta)
    app.add_template_filter(change_badge)
