/* Auditor's charts: small SVG line charts drawn from a JSON spec embedded in the page.
 *
 * <figure class="chart" data-chart="ID"><script type="application/json" id="ID">{spec}</script></figure>
 * spec = {x_label, y_label, x_ticks?: [labels], series: [{name, points: [[x, y]], band?: [[x, lo, hi]],
 *         style?: "dashed"|"dotted"}], markers?: [{x, y, label, note}], badges?: [{x, y, certified}]}
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

  function draw(figure, spec) {
    var series = spec.series || [], markers = spec.markers || [], badges = spec.badges || [];
    var xs = [], ys = [];
    series.forEach(function (s) {
      (s.points || []).forEach(function (p) { xs.push(p[0]); ys.push(p[1]); });
      (s.band || []).forEach(function (b) { ys.push(b[1]); ys.push(b[2]); });
    });
    markers.forEach(function (m) { xs.push(m.x); ys.push(m.y); });
    var xr = extent(xs), yr = extent(ys);
    var pad = (yr[1] - yr[0]) * 0.08; yr = [yr[0] - pad, yr[1] + pad];
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
    var every = Math.max(1, Math.ceil(xticks.length / 12));
    xticks.forEach(function (t, i) {
      if (i % every) return;
      var label = el("text", {x: sx(t), y: H - M.bottom + 16, "text-anchor": "middle"}, axes);
      label.textContent = spec.x_ticks ? String(spec.x_ticks[t]) : String(t);
    });
    var xl = el("text", {x: (W + M.left) / 2, y: H - 8, "text-anchor": "middle", "class": "axis-label"}, axes);
    xl.textContent = spec.x_label || "";
    var yl = el("text", {x: 14, y: (H - M.bottom) / 2, "text-anchor": "middle", "class": "axis-label",
                         transform: "rotate(-90 14 " + (H - M.bottom) / 2 + ")"}, axes);
    yl.textContent = spec.y_label || "";

    series.forEach(function (s, i) {
      var color = COLORS[i % COLORS.length];
      var band = (s.band || []).filter(function (b) { return finite(b[0]) && finite(b[1]) && finite(b[2]); });
      if (band.length > 1) {
        var d = band.map(function (b, j) { return (j ? "L" : "M") + sx(b[0]) + "," + sy(b[2]); }).join("") +
          band.slice().reverse().map(function (b) { return "L" + sx(b[0]) + "," + sy(b[1]); }).join("") + "Z";
        el("path", {d: d, fill: color, "fill-opacity": 0.15, stroke: "none", "class": "band"}, svg);
      }
      var pts = (s.points || []).filter(function (p) { return finite(p[0]) && finite(p[1]); });
      if (pts.length) {
        var line = pts.map(function (p, j) { return (j ? "L" : "M") + sx(p[0]) + "," + sy(p[1]); }).join("");
        var dash = s.style === "dashed" ? "6 4" : (s.style === "dotted" ? "2 3" : "none");
        el("path", {d: line, fill: "none", stroke: color, "stroke-width": 2, "stroke-dasharray": dash,
                    "class": "series"}, svg);
        pts.forEach(function (p) {
          var c = el("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 3, fill: color, "class": "point"}, svg);
          var t = el("title", {}, c); t.textContent = s.name + ": " + (+p[1].toFixed(4));
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
