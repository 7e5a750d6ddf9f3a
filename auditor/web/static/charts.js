/* Auditor's charts: small SVG line charts drawn from a JSON spec embedded in the page.
 *
 * <figure class="chart" data-chart="ID"><script type="application/json" id="ID">{spec}</script></figure>
 * spec = {x_label, y_label, x_ticks?: [labels], x_type?: "time", series: [{name, points: [[x, y]],
 *         band?: [[x, lo, hi]], style?: "dashed"|"dotted"}], markers?: [{x, y, label, note}],
 *         badges?: [{x, y, certified}], vlines?: [{x, label, note?, kind?}]}
 * x_type "time": x values are milliseconds since 1970 (UTC); the axis shows dates (x_unit_days: the
 * data's spacing, e.g. 7 for weekly points: no ticks between them).
 * vlines: a vertical line across the plot at x, labelled (e.g. where a change started).
 * Time series break (line and band) where a point is missing, more than 1.5 x_unit_days apart.
 * Text is set with textContent only, so labels coming from data stay inert.
 */
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var W = 720, H = 340, M = {top: 16, right: 16, bottom: 46, left: 58};
  var COLORS = ["#1f6feb", "#d1242f", "#8250df", "#1a7f37", "#bf8700", "#57606a"];

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(node);
    return node;
  }

  function finite(v) { return typeof v === "number" && isFinite(v); }

  function extent(values) {
    var lo = Infinity, hi = -Infinity;
    values.forEach(function (v) { if (finite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    if (lo === Infinity) return [0, 1];
    if (lo === hi) { lo -= 0.5; hi += 0.5; }
    return [lo, hi];
  }

  function ticks(lo, hi, n) {
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    [1, 2, 5, 10].some(function (m) { if ((hi - lo) / (step * m) <= n) { step *= m; return true; } return false; });
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toFixed(10));
    return out;
  }

  var DAY = 864e5;

  function isoDate(ms) { return new Date(ms).toISOString().slice(0, 10); }

  // Date ticks: days or weeks (on Mondays) for short spans, then first days of months, then years (UTC).
  function timeTicks(lo, hi, n, unit) {
    var span = (hi - lo) / DAY, out = [], t;
    var days = [1, 2, 7, 14, 28].filter(function (d) { return d >= unit && span / d <= n; })[0];
    if (days) {
      var origin = Date.UTC(1970, 0, 5);  // a Monday: weekly ticks fall on Mondays
      for (t = origin + Math.ceil((lo - origin) / (days * DAY)) * days * DAY; t <= hi; t += days * DAY) {
        out.push({at: t, label: isoDate(t)});
      }
      return out;
    }
    var months = [1, 2, 3, 6, 12, 24, 60].filter(function (m) { return span / (30.44 * m) <= n; })[0] || 120;
    var d = new Date(lo), y = d.getUTCFullYear(), m = d.getUTCMonth();
    m = Math.ceil(m / months) * months;
    for (;;) {
      t = Date.UTC(y + Math.floor(m / 12), m % 12, 1);
      if (t > hi) break;
      if (t >= lo) out.push({at: t, label: months >= 12 ? isoDate(t).slice(0, 4) : isoDate(t).slice(0, 7)});
      m += months;
    }
    return out;
  }

  function draw(figure, spec) {
    var series = spec.series || [], markers = spec.markers || [], badges = spec.badges || [];
    var vlines = spec.vlines || [], time = spec.x_type === "time";
    var xs = [], ys = [];
    series.forEach(function (s) {
      (s.points || []).forEach(function (p) { xs.push(p[0]); ys.push(p[1]); });
      (s.band || []).forEach(function (b) { ys.push(b[1]); ys.push(b[2]); });
    });
    markers.forEach(function (m) { xs.push(m.x); ys.push(m.y); });
    vlines.forEach(function (v) { xs.push(v.x); });
    var xr = extent(xs), yr = extent(ys);
    if (time) {
      // Half a week either side: the first and last weekly points stay off the axes.
      xr = xr[1] - xr[0] <= 1 ? [xr[0] - 3.5 * DAY, xr[1] + 3.5 * DAY] : [xr[0] - 0.5 * DAY, xr[1] + 0.5 * DAY];
    }
    var pad = (yr[1] - yr[0]) * 0.08; yr = [yr[0] - pad, yr[1] + pad];
    // Time series with a known spacing break where points are missing (an annotator's idle weeks).
    var gap = time && spec.x_unit_days ? 1.5 * spec.x_unit_days * DAY : Infinity;
    var runs = function (arr) {
      var out = [], run = [];
      arr.forEach(function (p, j) {
        if (j && p[0] - arr[j - 1][0] > gap) { out.push(run); run = []; }
        run.push(p);
      });
      if (run.length) out.push(run);
      return out;
    };
    var sx = function (x) { return M.left + (x - xr[0]) / (xr[1] - xr[0]) * (W - M.left - M.right); };
    var sy = function (y) { return H - M.bottom - (y - yr[0]) / (yr[1] - yr[0]) * (H - M.top - M.bottom); };

    var svg = el("svg", {viewBox: "0 0 " + W + " " + H, role: "img", "class": "chart-svg"});
    var title = el("title", {}, svg); title.textContent = figure.querySelector("figcaption") ?
      figure.querySelector("figcaption").textContent : "chart";
    var axes = el("g", {"class": "axes"}, svg);
    el("line", {x1: M.left, y1: H - M.bottom, x2: W - M.right, y2: H - M.bottom}, axes);
    el("line", {x1: M.left, y1: M.top, x2: M.left, y2: H - M.bottom}, axes);
    ticks(yr[0], yr[1], 6).forEach(function (t) {
      el("line", {x1: M.left, x2: W - M.right, y1: sy(t), y2: sy(t), "class": "grid"}, axes);
      var label = el("text", {x: M.left - 6, y: sy(t) + 4, "text-anchor": "end"}, axes);
      label.textContent = String(+t.toFixed(4));
    });
    var xticks = spec.x_ticks ? spec.x_ticks.map(function (_, i) { return i; }) : ticks(xr[0], xr[1], 8);
    // Counts (raters, data versions) take whole-number ticks only.
    if (!spec.x_ticks && xs.every(function (x) { return !finite(x) || Math.round(x) === x; }) &&
        series.length) {
      xticks = xticks.filter(function (t) { return Math.round(t) === t; });
    }
    var xlabels = xticks.map(function (t) { return spec.x_ticks ? String(spec.x_ticks[t]) : String(t); });
    if (time) {
      var dated = timeTicks(xr[0], xr[1], 7, spec.x_unit_days || 1);
      xticks = dated.map(function (d) { return d.at; });
      xlabels = dated.map(function (d) { return d.label; });
    }
    var every = Math.max(1, Math.ceil(xticks.length / 12));
    xticks.forEach(function (t, i) {
      if (i % every) return;
      if (time) el("line", {x1: sx(t), x2: sx(t), y1: H - M.bottom, y2: H - M.bottom + 4}, axes);
      var label = el("text", {x: sx(t), y: H - M.bottom + 16, "text-anchor": "middle", "class": "x-tick"}, axes);
      label.textContent = xlabels[i];
    });
    var xl = el("text", {x: (W + M.left) / 2, y: H - 8, "text-anchor": "middle", "class": "axis-label"}, axes);
    xl.textContent = spec.x_label || "";
    var yl = el("text", {x: 14, y: (H - M.bottom) / 2, "text-anchor": "middle", "class": "axis-label",
                         transform: "rotate(-90 14 " + (H - M.bottom) / 2 + ")"}, axes);
    yl.textContent = spec.y_label || "";

    series.forEach(function (s, i) {
      var color = COLORS[i % COLORS.length];
      var band = (s.band || []).filter(function (b) { return finite(b[0]) && finite(b[1]) && finite(b[2]); });
      var area = "", bars = "";
      runs(band).forEach(function (run) {
        if (run.length > 1) {
          area += run.map(function (b, j) { return (j ? "L" : "M") + sx(b[0]) + "," + sy(b[2]); }).join("") +
            run.slice().reverse().map(function (b) { return "L" + sx(b[0]) + "," + sy(b[1]); }).join("") + "Z";
        } else {
          // A lone point (one week, say): its interval as a bar.
          bars += "M" + sx(run[0][0]) + "," + sy(run[0][1]) + "L" + sx(run[0][0]) + "," + sy(run[0][2]);
        }
      });
      if (area) el("path", {d: area, fill: color, "fill-opacity": 0.15, stroke: "none", "class": "band"}, svg);
      if (bars) {
        el("path", {d: bars, stroke: color, "stroke-opacity": 0.3, "stroke-width": 8, fill: "none",
                    "class": "band band-bar"}, svg);
      }
      var pts = (s.points || []).filter(function (p) { return finite(p[0]) && finite(p[1]); });
      if (pts.length) {
        var line = runs(pts).map(function (run) {
          return run.map(function (p, j) { return (j ? "L" : "M") + sx(p[0]) + "," + sy(p[1]); }).join("");
        }).join("");
        var dash = s.style === "dashed" ? "6 4" : (s.style === "dotted" ? "2 3" : "none");
        el("path", {d: line, fill: "none", stroke: color, "stroke-width": 2, "stroke-dasharray": dash,
                    "class": "series"}, svg);
        var intervals = {};
        band.forEach(function (b) { intervals[b[0]] = b; });
        pts.forEach(function (p) {
          var c = el("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 3, fill: color, "class": "point"}, svg);
          var t = el("title", {}, c);
          var iv = intervals[p[0]];
          t.textContent = (time ? (spec.x_unit_days === 7 ? "week of " : "") + isoDate(p[0]) + ", " : "") + s.name +
            ": " + (+p[1].toFixed(4)) + (iv ? " [" + (+iv[1].toFixed(4)) + ", " + (+iv[2].toFixed(4)) + "]" : "");
        });
      }
    });

    markers.forEach(function (m) {
      var g = el("g", {"class": "marker"}, svg);
      if (finite(m.y)) {
        el("line", {x1: M.left, x2: W - M.right, y1: sy(m.y), y2: sy(m.y), stroke: "#57606a",
                    "stroke-dasharray": "3 3"}, g);
      }
      if (finite(m.x) && finite(m.y)) {
        el("line", {x1: sx(m.x), x2: sx(m.x), y1: sy(m.y), y2: H - M.bottom, stroke: "#57606a",
                    "stroke-dasharray": "3 3"}, g);
        el("circle", {cx: sx(m.x), cy: sy(m.y), r: 5, fill: "#ffffff", stroke: "#24292f", "stroke-width": 2}, g);
      }
      var text = el("text", {x: finite(m.x) ? sx(m.x) + 6 : W - M.right - 4, y: sy(finite(m.y) ? m.y : yr[1]) - 6,
                             "text-anchor": finite(m.x) ? "start" : "end", "class": "marker-label"}, g);
      text.textContent = m.label + (finite(m.x) ? " ≈ " + m.x.toFixed(2) + " raters" : (m.note ? " (" + m.note + ")" : ""));
    });

    vlines.forEach(function (v, i) {
      if (!finite(v.x)) return;
      var g = el("g", {"class": "vline" + (v.kind ? " vline-" + String(v.kind).replace(/[^a-z]/g, "") : "")}, svg);
      var x = sx(v.x), right = x > (W - M.right + M.left) / 2;
      el("line", {x1: x, x2: x, y1: M.top, y2: H - M.bottom, "stroke-width": 2, "stroke-dasharray": "5 3"}, g);
      var text = el("text", {x: right ? x - 5 : x + 5, y: M.top + 11 + 13 * (i % 4), "text-anchor": right ? "end" : "start",
                             "class": "vline-label"}, g);
      text.textContent = (v.label || "") + (v.note ? " (" + v.note + ")" : "");
      var tip = el("title", {}, g); tip.textContent = text.textContent;
    });

    badges.forEach(function (b) {
      if (!finite(b.x) || !finite(b.y)) return;
      var c = el("circle", {cx: sx(b.x), cy: sy(b.y), r: 7, "class": b.certified ? "badge-yes" : "badge-no"}, svg);
      var t = el("title", {}, c); t.textContent = b.certified ? "certified" : "not certified";
    });

    var legend = document.createElement("ul");
    legend.className = "legend";
    series.forEach(function (s, i) {
      var li = document.createElement("li");
      var swatch = document.createElement("span");
      swatch.className = "swatch swatch-" + (i % COLORS.length);
      li.appendChild(swatch);
      li.appendChild(document.createTextNode(s.name));
      legend.appendChild(li);
    });
    figure.appendChild(svg);
    figure.appendChild(legend);
    figure.setAttribute("data-rendered", "true");
  }

  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("figure.chart[data-chart]"), function (fig) {
      var source = document.getElementById(fig.getAttribute("data-chart"));
      try {
        draw(fig, JSON.parse(source.textContent));
      } catch (err) {
        fig.setAttribute("data-rendered", "error");
        var p = document.createElement("p");
        p.className = "error";
        p.textContent = "This chart could not be drawn: " + err.message;
        fig.appendChild(p);
      }
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
