/* Auditor's charts: interactive uPlot charts drawn from a JSON spec embedded in the page.
 *
 * <figure class="chart" data-chart="ID"><figcaption>..</figcaption>
 *   <script type="application/json" id="ID">{spec}</script></figure>
 *
 * spec = {x_type?: "time"|"number"|"category", x_label, y_label, x_ticks?: [labels] (category axis),
 *         x_unit_days?: 7, y_digits?: 3,
 *         series: [{name, points: [[x, y]], band?: [[x, lo, hi]], style?: "dashed"|"dotted"}],
 *         markers?: [{x, y, label, note?, x_low?, x_high?, y_low?, y_high?}],
 *         badges?: [{x, y, certified}], vlines?: [{x, label, note?, kind?}], hlines?: [{y, label, kind?}]}
 *
 * x_type "time": x values are milliseconds since 1970; the axis shows UTC dates (weekly data: Mondays).
 * A series' band is its 95% interval, drawn as a shaded band (a whisker where a point stands alone).
 * Markers are points of their own (e.g. a release's score at its survey equivalence, with the
 * equivalence interval as a horizontal whisker); badges mark certified (filled) and not certified
 * (hollow) releases; vlines mark where a change started; hlines a reference value (BEST, a threshold).
 *
 * Hovering shows the exact values (and intervals) at the nearest x; the legend's buttons show and hide
 * series; dragging across the plot zooms in on x, a double click zooms out. Charts follow their
 * figure's width. Text from the data is only ever set with textContent or drawn on the canvas.
 */
(function () {
  "use strict";
  var COLORS = ["#1f6feb", "#d1242f", "#8250df", "#1a7f37", "#bf8700", "#57606a", "#0a7ea4", "#c2185b"];
  var OK = "#1a7f37", NO = "#cf222e", INK = "#24292f", MUTED = "#57606a";
  var FONT = "12px system-ui, -apple-system, 'Segoe UI', sans-serif";
  var DAY = 864e5;

  function finite(v) { return typeof v === "number" && isFinite(v); }

  function rgba(hex, alpha) {
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + alpha + ")";
  }

  function isoDate(ms) { return new Date(ms).toISOString().slice(0, 10); }

  function fmt(v, digits) {
    if (!finite(v)) return "–";
    return v.toFixed(digits);
  }

  // Date ticks (UTC): days or weeks (on Mondays) for short spans, then first days of months, then years.
  function timeSplits(lo, hi, n, unit) {
    var span = (hi - lo) / DAY, out = [], t;
    var days = [1, 2, 7, 14, 28].filter(function (d) { return d >= unit && span / d <= n; })[0];
    if (days) {
      var origin = days % 7 === 0 ? Date.UTC(1970, 0, 5) : Date.UTC(1970, 0, 1);  // 5 January 1970: a Monday
      for (t = origin + Math.ceil((lo - origin) / (days * DAY)) * days * DAY; t <= hi; t += days * DAY) out.push(t);
      return {ticks: out, label: function (x) { return isoDate(x); }};
    }
    var months = [1, 2, 3, 6, 12, 24, 60].filter(function (m) { return span / (30.44 * m) <= n; })[0] || 120;
    var d = new Date(lo), y = d.getUTCFullYear(), m = Math.ceil(d.getUTCMonth() / months) * months;
    for (;;) {
      t = Date.UTC(y + Math.floor(m / 12), m % 12, 1);
      if (t > hi) break;
      if (t >= lo) out.push(t);
      m += months;
    }
    return {ticks: out, label: function (x) { return months >= 12 ? isoDate(x).slice(0, 4) : isoDate(x).slice(0, 7); }};
  }

  // Evenly spaced numeric ticks at 1, 2 or 5 times a power of ten.
  function niceSplits(lo, hi, n, integers) {
    if (!(hi > lo)) return [lo];
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    [1, 2, 5, 10].some(function (m) { if ((hi - lo) / (step * m) <= n) { step *= m; return true; } return false; });
    if (integers) step = Math.max(1, Math.round(step));
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toFixed(10));
    return out;
  }

  /* The spec as uPlot's aligned data: one x array (the union of every series' and marker's x) and
   * one y array per series, null where it has no value; plus what each uPlot series stands for. */
  function build(spec) {
    var type = spec.x_type || (spec.x_ticks ? "category" : "number");
    var xs = {};
    var addX = function (x) { if (finite(x)) xs[x] = true; };
    (spec.series || []).forEach(function (s) {
      (s.points || []).forEach(function (p) { addX(p[0]); });
      (s.band || []).forEach(function (b) { addX(b[0]); });
    });
    (spec.markers || []).forEach(function (m) { addX(m.x); });
    (spec.badges || []).forEach(function (b) { addX(b.x); });
    var x = Object.keys(xs).map(Number).sort(function (a, b) { return a - b; });
    var at = {};
    x.forEach(function (v, i) { at[v] = i; });
    var column = function () { return x.map(function () { return null; }); };
    var data = [x], roles = [{role: "x"}], color = 0;

    (spec.series || []).forEach(function (s) {
      var ys = column(), lo = null, hi = null;
      (s.points || []).forEach(function (p) { if (finite(p[0]) && finite(p[1])) ys[at[p[0]]] = p[1]; });
      var c = COLORS[color++ % COLORS.length];
      var main = data.length;
      data.push(ys);
      roles.push({role: "series", name: s.name, color: c, style: s.style, spec: s, digits: s.digits});
      var band = (s.band || []).filter(function (b) { return finite(b[0]) && finite(b[1]) && finite(b[2]); });
      if (band.length) {
        lo = column(); hi = column();
        band.forEach(function (b) { lo[at[b[0]]] = b[1]; hi[at[b[0]]] = b[2]; });
        data.push(hi); roles.push({role: "hi", of: main, color: c});
        data.push(lo); roles.push({role: "lo", of: main, color: c});
        roles[main].hi = main + 1; roles[main].lo = main + 2;
      }
    });
    (spec.markers || []).forEach(function (m) {
      var ys = column();
      if (finite(m.x) && finite(m.y)) ys[at[m.x]] = m.y;
      var c = COLORS[color++ % COLORS.length];
      data.push(ys);
      roles.push({role: "marker", name: m.label, color: c, marker: m});
    });
    var badges = spec.badges || [];
    if (badges.length) {
      [true, false].forEach(function (yes) {
        var ys = column();
        badges.forEach(function (b) { if (b.certified === yes && finite(b.x) && finite(b.y)) ys[at[b.x]] = b.y; });
        if (ys.some(function (v) { return v !== null; })) {
          data.push(ys);
          roles.push({role: "badge", name: yes ? "certified" : "not certified", color: yes ? OK : NO, certified: yes});
        }
      });
    }
    return {type: type, data: data, roles: roles};
  }

  function yExtent(spec, built) {
    var lo = Infinity, hi = -Infinity;
    built.data.slice(1).forEach(function (col) {
      col.forEach(function (v) { if (finite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    });
    (spec.hlines || []).forEach(function (h) { if (finite(h.y)) { lo = Math.min(lo, h.y); hi = Math.max(hi, h.y); } });
    (spec.markers || []).forEach(function (m) {
      [m.y_low, m.y_high].forEach(function (v) { if (finite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    });
    if (lo === Infinity) return [0, 1];
    if (lo === hi) { lo -= 0.05; hi += 0.05; }
    // Room above and below: the largest markers (badges) stay inside the plot, never clipped.
    var pad = (hi - lo) * 0.1;
    return [lo - pad, hi + pad];
  }

  function xExtent(spec, built) {
    var x = built.data[0];
    var lo = x.length ? x[0] : 0, hi = x.length ? x[x.length - 1] : 1;
    (spec.vlines || []).forEach(function (v) { if (finite(v.x)) { lo = Math.min(lo, v.x); hi = Math.max(hi, v.x); } });
    (spec.markers || []).forEach(function (m) {
      [m.x_low, m.x_high].forEach(function (v) { if (finite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    });
    if (built.type === "category") return [-0.5, Math.max(hi, 0) + 0.5];
    if (built.type === "time") {
      // Half a unit either side; a lone point (one audit, one week) gets a week around it, never
      // uPlot's own range for one value (which spans 1970 to 2080).
      var half = 0.5 * (spec.x_unit_days || 1) * DAY;
      if (lo === hi) half = Math.max(half, 3.5 * DAY);
      return [lo - half, hi + half];
    }
    if (lo === hi) return [lo - 1, hi + 1];
    var pad = (hi - lo) * 0.03;
    return [lo - pad, hi + pad];
  }

  function xText(spec, built, v) {
    if (built.type === "time") return (spec.x_unit_days === 7 ? "week of " : "") + isoDate(v);
    if (built.type === "category") return spec.x_ticks && spec.x_ticks[v] !== undefined ? String(spec.x_ticks[v]) : String(v);
    return (spec.x_label ? spec.x_label + " " : "") + (Math.round(v) === v ? String(v) : v.toFixed(2));
  }

  /* Labels placed next to their points without overlapping one another (greedy: the first free
   * spot among a few around the point; a label with no free spot is left to the legend and tooltip). */
  function placeLabels(u, items) {
    var ctx = u.ctx, dpr = uPlot.pxRatio, box = u.bbox, placed = [];
    ctx.save();
    ctx.font = FONT.replace("12px", Math.round(12 * dpr) + "px");
    ctx.textBaseline = "middle";
    ctx.textAlign = "left";
    items.forEach(function (it) {
      var w = ctx.measureText(it.text).width, h = 14 * dpr, gap = 7 * dpr;
      var spots = [[gap, -gap - h / 2], [gap, gap + h / 2], [-gap - w, -gap - h / 2], [-gap - w, gap + h / 2],
                   [gap, -gap - 1.5 * h], [-gap - w, -gap - 1.5 * h], [gap, gap + 1.5 * h], [-gap - w, gap + 1.5 * h]];
      for (var i = 0; i < spots.length; i++) {
        var r = {x: it.x + spots[i][0], y: it.y + spots[i][1] - h / 2, w: w, h: h};
        if (r.x < box.left || r.x + r.w > box.left + box.width || r.y < box.top || r.y + r.h > box.top + box.height) continue;
        var clash = placed.some(function (p) { return r.x < p.x + p.w && p.x < r.x + r.w && r.y < p.y + p.h && p.y < r.y + r.h; });
        if (clash) continue;
        r.text = it.text;
        placed.push(r);
        ctx.fillStyle = "rgba(255,255,255,0.85)";
        ctx.fillRect(r.x - 2 * dpr, r.y, r.w + 4 * dpr, r.h);
        ctx.fillStyle = it.color;
        ctx.fillText(it.text, r.x, r.y + h / 2);
        it.placed = true;
        break;
      }
    });
    ctx.restore();
    return placed;
  }

  /* Each banded series' 95% interval, under the lines: a shaded band over each run of points (a time
   * series breaks where a window is missing), a whisker where a point stands alone. */
  function drawBands(u, spec, built) {
    var ctx = u.ctx, dpr = uPlot.pxRatio, box = u.bbox;
    var X = function (v) { return u.valToPos(v, "x", true); }, Y = function (v) { return u.valToPos(v, "y", true); };
    var gap = built.type === "time" && spec.x_unit_days ? 1.5 * spec.x_unit_days * DAY : Infinity;
    ctx.save();
    ctx.beginPath();
    ctx.rect(box.left, box.top, box.width, box.height);
    ctx.clip();
    built.roles.forEach(function (r, i) {
      if (r.role !== "series" || r.lo === undefined || !u.series[i].show) return;
      var xs = u.data[0], lo = u.data[r.lo], hi = u.data[r.hi], runs = [], run = [];
      for (var j = 0; j < xs.length; j++) {
        if (!finite(lo[j]) || !finite(hi[j])) continue;
        if (run.length && xs[j] - run[run.length - 1] > gap) { runs.push(run); run = []; }
        run.push(xs[j]);
        run.lo = run.lo || []; run.hi = run.hi || [];
        run.lo.push(lo[j]); run.hi.push(hi[j]);
      }
      if (run.length) runs.push(run);
      runs.forEach(function (pts) {
        if (pts.length === 1) {
          ctx.strokeStyle = rgba(r.color, 0.45);
          ctx.lineWidth = 6 * dpr;
          ctx.beginPath(); ctx.moveTo(X(pts[0]), Y(pts.lo[0])); ctx.lineTo(X(pts[0]), Y(pts.hi[0])); ctx.stroke();
          return;
        }
        ctx.fillStyle = rgba(r.color, 0.16);
        ctx.beginPath();
        pts.forEach(function (x, k) { if (k) ctx.lineTo(X(x), Y(pts.hi[k])); else ctx.moveTo(X(x), Y(pts.hi[k])); });
        for (var k = pts.length - 1; k >= 0; k--) ctx.lineTo(X(pts[k]), Y(pts.lo[k]));
        ctx.closePath();
        ctx.fill();
      });
    });
    ctx.restore();
  }

  function drawExtras(u, spec, built, figure) {
    var ctx = u.ctx, dpr = uPlot.pxRatio, box = u.bbox;
    var X = function (v) { return u.valToPos(v, "x", true); }, Y = function (v) { return u.valToPos(v, "y", true); };
    var inside = function (px) { return px >= box.left - 0.5 && px <= box.left + box.width + 0.5; };
    ctx.save();
    ctx.beginPath();
    ctx.rect(box.left, box.top, box.width, box.height);
    ctx.clip();
    // Reference lines across the plot (BEST, a threshold).
    var labels = [];
    (spec.hlines || []).forEach(function (h) {
      if (!finite(h.y)) return;
      var y = Y(h.y);
      ctx.strokeStyle = h.kind === "threshold" ? NO : MUTED;
      ctx.lineWidth = 1.5 * dpr;
      ctx.setLineDash([6 * dpr, 4 * dpr]);
      ctx.beginPath(); ctx.moveTo(box.left, y); ctx.lineTo(box.left + box.width, y); ctx.stroke();
      ctx.setLineDash([]);
      labels.push({x: box.left + box.width - 8 * dpr, y: y, text: h.label, color: h.kind === "threshold" ? NO : MUTED,
                   right: true});
    });
    // Markers: their score as a faint horizontal line, their interval(s) as whiskers.
    built.roles.forEach(function (r, i) {
      if (r.role !== "marker" || !u.series[i].show) return;
      var m = r.marker;
      ctx.strokeStyle = rgba(r.color, 0.55);
      ctx.lineWidth = 1 * dpr;
      if (finite(m.y)) {
        ctx.setLineDash([3 * dpr, 3 * dpr]);
        ctx.beginPath(); ctx.moveTo(box.left, Y(m.y)); ctx.lineTo(finite(m.x) ? X(m.x) : box.left + box.width, Y(m.y));
        ctx.stroke();
        ctx.setLineDash([]);
      }
      ctx.lineWidth = 2.5 * dpr;
      if (finite(m.x_low) && finite(m.x_high) && finite(m.y)) {
        ctx.beginPath(); ctx.moveTo(X(m.x_low), Y(m.y)); ctx.lineTo(X(m.x_high), Y(m.y)); ctx.stroke();
      }
      if (finite(m.y_low) && finite(m.y_high) && finite(m.x)) {
        ctx.beginPath(); ctx.moveTo(X(m.x), Y(m.y_low)); ctx.lineTo(X(m.x), Y(m.y_high)); ctx.stroke();
      }
      var text = m.label + (finite(m.x) ? "" : (m.note ? " (" + m.note + ")" : ""));
      labels.push({x: finite(m.x) ? X(m.x) : box.left + box.width - 8 * dpr, y: Y(m.y), text: text, color: r.color,
                   right: !finite(m.x)});
    });
    // Changes: a vertical line where each started.
    (spec.vlines || []).forEach(function (v, k) {
      if (!finite(v.x)) return;
      var x = X(v.x);
      if (!inside(x)) return;
      var c = v.kind === "drop" ? NO : (v.kind === "rise" ? OK : INK);
      ctx.strokeStyle = c;
      ctx.lineWidth = 2 * dpr;
      ctx.setLineDash([5 * dpr, 3 * dpr]);
      ctx.beginPath(); ctx.moveTo(x, box.top); ctx.lineTo(x, box.top + box.height); ctx.stroke();
      ctx.setLineDash([]);
      labels.push({x: x, y: box.top + (14 + 16 * (k % 4)) * dpr, text: v.label + (v.note ? " (" + v.note + ")" : ""),
                   color: c});
    });
    ctx.restore();
    var placed = placeLabels(u, labels.map(function (l) {
      if (!l.right) return l;
      // Right-anchored labels: start left of the anchor.
      var ctx2 = u.ctx;
      ctx2.save(); ctx2.font = FONT.replace("12px", Math.round(12 * dpr) + "px");
      var w = ctx2.measureText(l.text).width;
      ctx2.restore();
      return {x: l.x - w - 14 * dpr, y: l.y, text: l.text, color: l.color};
    }));
    figure.setAttribute("data-labels", String(placed.length));
    if (figure._chart) {
      figure._chart.labels = placed.map(function (r) { return {x: r.x, y: r.y, w: r.w, h: r.h, text: r.text}; });
      figure._chart.box = {left: box.left, top: box.top, width: box.width, height: box.height};
    }
  }

  function tooltip(u, spec, built, tip) {
    var idx = u.cursor.idx;
    if (idx === null || idx === undefined || u.cursor.left < 0) { tip.hidden = true; return; }
    var rows = [];
    built.roles.forEach(function (r, i) {
      if (!u.series[i].show || (r.role !== "series" && r.role !== "marker" && r.role !== "badge")) return;
      var v = u.data[i][idx];
      if (!finite(v)) return;
      var digits = r.digits || spec.y_digits || 3;
      var text = r.name + ": " + fmt(v, digits);
      if (r.role === "series" && r.lo !== undefined && finite(u.data[r.lo][idx]) && finite(u.data[r.hi][idx])) {
        text += " [" + fmt(u.data[r.lo][idx], digits) + ", " + fmt(u.data[r.hi][idx], digits) + "]";
      }
      if (r.role === "marker") {
        var m = r.marker;
        if (finite(m.y_low) && finite(m.y_high)) text += " [" + fmt(m.y_low, digits) + ", " + fmt(m.y_high, digits) + "]";
        if (finite(m.x)) {
          text += " at " + (spec.marker_x_word ? spec.marker_x_word + " " : "") + fmt(m.x, 2);
          if (finite(m.x_low) && finite(m.x_high)) text += " [" + fmt(m.x_low, 2) + ", " + fmt(m.x_high, 2) + "]";
        }
        if (m.note) text += " (" + m.note + ")";
      }
      rows.push({text: text, color: r.color});
    });
    if (!rows.length) { tip.hidden = true; return; }
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    var head = document.createElement("div");
    head.className = "chart-tip-x";
    head.textContent = xText(spec, built, u.data[0][idx]);
    tip.appendChild(head);
    rows.forEach(function (row) {
      var line = document.createElement("div");
      var sw = document.createElement("span");
      sw.className = "chart-tip-swatch";
      sw.style.background = row.color;
      line.appendChild(sw);
      line.appendChild(document.createTextNode(row.text));
      tip.appendChild(line);
    });
    tip.hidden = false;
    var left = u.valToPos(u.data[0][idx], "x"), width = u.over.clientWidth;
    tip.style.top = Math.max(0, Math.min(u.cursor.top, u.over.clientHeight - tip.offsetHeight)) + "px";
    tip.style.left = (left + 14 + tip.offsetWidth > width ? Math.max(0, left - 14 - tip.offsetWidth) : left + 14) + "px";
  }

  // --- zoom in the URL: zoom-<chart id>=<from>..<to> (dates for time axes) -----------------------

  function zoomParam(id) { return "zoom-" + id; }

  function zoomText(range, type) {
    if (type === "time") return isoDate(range[0]) + ".." + isoDate(range[1]);
    return range.map(function (v) { return String(+v.toFixed(4)); }).join("..");
  }

  function readZoom(id, type) {
    var raw = new URLSearchParams(window.location.search).get(zoomParam(id));
    if (!raw || raw.length > 80) return null;
    var parts = raw.split("..");
    if (parts.length !== 2) return null;
    var read = type === "time" ? function (t) { return /^\d{4}-\d{2}-\d{2}$/.test(t) ? Date.parse(t + "T00:00:00Z") : NaN; }
                               : function (t) { return /^-?\d+(\.\d+)?$/.test(t) ? parseFloat(t) : NaN; };
    var lo = read(parts[0]), hi = read(parts[1]);
    if (type === "time") hi += DAY - 1;  // to the end of that day
    return finite(lo) && finite(hi) && hi > lo ? [lo, hi] : null;
  }

  function writeZoom(id, range, type) {
    if (!window.history || !window.history.replaceState) return;
    var url = new URL(window.location.href);
    if (range) url.searchParams.set(zoomParam(id), zoomText(range, type));
    else url.searchParams.delete(zoomParam(id));
    window.history.replaceState(window.history.state, "", url.pathname + url.search + url.hash);
  }

  // --- downloads: the chart as a PNG (its canvas on white, with its caption) or an SVG drawing ----

  function save(blob, name) {
    var a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a);
    a.click();
    setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 0);
  }

  function caption(figure) {
    var c = figure.querySelector("figcaption");
    return c ? c.textContent.trim() : "";
  }

  function png(figure, u, name) {
    var src = u.ctx.canvas, dpr = uPlot.pxRatio, head = Math.round(24 * dpr);
    var out = document.createElement("canvas");
    out.width = src.width; out.height = src.height + head;
    var ctx = out.getContext("2d");
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, out.width, out.height);
    ctx.fillStyle = INK;
    ctx.font = FONT.replace("12px", Math.round(13 * dpr) + "px");
    ctx.textBaseline = "middle";
    ctx.fillText(caption(figure).slice(0, 200), 8 * dpr, head / 2, out.width - 16 * dpr);
    ctx.drawImage(src, 0, head);
    out.toBlob(function (blob) { save(blob, name + ".png"); }, "image/png");
  }

  function esc(text) {
    return String(text).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;"}[c]; });
  }

  /* The chart drawn again as SVG from uPlot's own scales: the plot's frame, grid and tick labels,
   * each band, line and point, markers, badges and reference lines; the caption as its title. */
  function svg(figure, u, spec, built) {
    var box = u.bbox, dpr = uPlot.pxRatio, head = 24;
    var L = box.left / dpr, T = box.top / dpr + head, W = box.width / dpr, H = box.height / dpr;
    var X = function (v) { return L + u.valToPos(v, "x"); }, Y = function (v) { return T + u.valToPos(v, "y"); };
    var inX = function (v) { var p = u.valToPos(v, "x"); return p >= -0.5 && p <= W + 0.5; };
    var out = [], f = function (v) { return (+v).toFixed(1); };
    var width = u.width, height = u.height + head;
    out.push('<svg xmlns="http://www.w3.org/2000/svg" width="' + width + '" height="' + height + '" viewBox="0 0 ' +
             width + " " + height + '" font-family="system-ui, sans-serif" font-size="12">');
    out.push("<title>" + esc(caption(figure)) + "</title>");
    out.push('<rect width="100%" height="100%" fill="#ffffff"/>');
    out.push('<text x="8" y="16" font-size="13" fill="' + INK + '">' + esc(caption(figure).slice(0, 200)) + "</text>");
    out.push('<defs><clipPath id="plot"><rect x="' + f(L) + '" y="' + f(T) + '" width="' + f(W) + '" height="' + f(H) +
             '"/></clipPath></defs>');
    // Axes: grid lines and tick labels as uPlot placed them.
    u.axes.forEach(function (axis, i) {
      var splits = axis._splits || [], values = axis._values || [], horizontal = i === 0;
      splits.forEach(function (v, k) {
        if (!finite(v)) return;
        if (horizontal) {
          if (!inX(v)) return;
          out.push('<line x1="' + f(X(v)) + '" x2="' + f(X(v)) + '" y1="' + f(T) + '" y2="' + f(T + H) + '" stroke="#eaeef2"/>');
          out.push('<text x="' + f(X(v)) + '" y="' + f(T + H + 16) + '" text-anchor="middle" fill="' + INK + '">' +
                   esc(values[k] === undefined ? "" : values[k]) + "</text>");
        } else {
          out.push('<line x1="' + f(L) + '" x2="' + f(L + W) + '" y1="' + f(Y(v)) + '" y2="' + f(Y(v)) + '" stroke="#eaeef2"/>');
          out.push('<text x="' + f(L - 6) + '" y="' + f(Y(v) + 4) + '" text-anchor="end" fill="' + INK + '">' +
                   esc(values[k] === undefined ? "" : values[k]) + "</text>");
        }
      });
    });
    out.push('<rect x="' + f(L) + '" y="' + f(T) + '" width="' + f(W) + '" height="' + f(H) + '" fill="none" stroke="#8c959f"/>');
    out.push('<text x="' + f(L + W / 2) + '" y="' + f(T + H + 32) + '" text-anchor="middle" fill="' + INK + '">' +
             esc(spec.x_label || "") + "</text>");
    out.push('<text transform="translate(14 ' + f(T + H / 2) + ') rotate(-90)" text-anchor="middle" fill="' + INK + '">' +
             esc(spec.y_label || "") + "</text>");
    out.push('<g clip-path="url(#plot)">');
    var xs = u.data[0];
    built.roles.forEach(function (r, i) {
      if (!u.series[i].show) return;
      var ys = u.data[i];
      if (r.role === "series" && r.lo !== undefined) {
        var lo = u.data[r.lo], hi = u.data[r.hi], top = [], bottom = [];
        xs.forEach(function (x, j) { if (finite(lo[j]) && finite(hi[j])) { top.push(f(X(x)) + "," + f(Y(hi[j]))); bottom.unshift(f(X(x)) + "," + f(Y(lo[j]))); } });
        if (top.length > 1) out.push('<polygon points="' + top.concat(bottom).join(" ") + '" fill="' + rgba(r.color, 0.16) + '"/>');
        else if (top.length === 1) out.push('<polyline points="' + top[0] + " " + bottom[0] + '" stroke="' + rgba(r.color, 0.45) + '" stroke-width="6"/>');
      }
      var pts = [];
      xs.forEach(function (x, j) { if (finite(ys[j])) pts.push([X(x), Y(ys[j])]); });
      if (r.role === "series") {
        var dash = r.style === "dashed" ? ' stroke-dasharray="7 4"' : (r.style === "dotted" ? ' stroke-dasharray="2 3"' : "");
        if (pts.length > 1) out.push('<polyline points="' + pts.map(function (p) { return f(p[0]) + "," + f(p[1]); }).join(" ") +
                                     '" fill="none" stroke="' + r.color + '" stroke-width="2"' + dash + "/>");
        pts.forEach(function (p) { out.push('<circle cx="' + f(p[0]) + '" cy="' + f(p[1]) + '" r="3" fill="' + r.color + '"/>'); });
      } else if (r.role === "marker" || r.role === "badge") {
        var fill = r.role === "badge" && !r.certified ? "#ffffff" : r.color, rad = r.role === "badge" ? 6 : 5;
        pts.forEach(function (p) {
          out.push('<circle cx="' + f(p[0]) + '" cy="' + f(p[1]) + '" r="' + rad + '" fill="' + fill + '" stroke="' +
                   (r.role === "badge" ? r.color : INK) + '" stroke-width="2"/>');
          if (r.role === "marker") out.push('<text x="' + f(p[0] + 8) + '" y="' + f(p[1] - 8) + '" fill="' + r.color + '">' + esc(r.name) + "</text>");
        });
      }
    });
    (spec.hlines || []).forEach(function (h) {
      if (!finite(h.y)) return;
      var c = h.kind === "threshold" ? NO : MUTED;
      out.push('<line x1="' + f(L) + '" x2="' + f(L + W) + '" y1="' + f(Y(h.y)) + '" y2="' + f(Y(h.y)) + '" stroke="' + c +
               '" stroke-width="1.5" stroke-dasharray="6 4"/>');
      out.push('<text x="' + f(L + W - 6) + '" y="' + f(Y(h.y) - 4) + '" text-anchor="end" fill="' + c + '">' + esc(h.label || "") + "</text>");
    });
    (spec.vlines || []).forEach(function (v, k) {
      if (!finite(v.x) || !inX(v.x)) return;
      var c = v.kind === "drop" ? NO : (v.kind === "rise" ? OK : INK);
      out.push('<line x1="' + f(X(v.x)) + '" x2="' + f(X(v.x)) + '" y1="' + f(T) + '" y2="' + f(T + H) + '" stroke="' + c +
               '" stroke-width="2" stroke-dasharray="5 3"/>');
      out.push('<text x="' + f(X(v.x) + 6) + '" y="' + f(T + 14 + 16 * (k % 4)) + '" fill="' + c + '">' +
               esc(v.label + (v.note ? " (" + v.note + ")" : "")) + "</text>");
    });
    out.push("</g>");
    out.push("</svg>");
    return out.join("\n");
  }

  function downloads(figure, u, spec, built) {
    var div = document.createElement("div");
    div.className = "chart-actions";
    var name = (figure.getAttribute("data-chart") || "chart").replace(/[^a-z0-9-]+/gi, "-");
    [["PNG", function () { png(figure, u, name); }],
     ["SVG", function () { save(new Blob([svg(figure, u, spec, built)], {type: "image/svg+xml"}), name + ".svg"); }]
    ].forEach(function (pair) {
      var b = document.createElement("button");
      b.type = "button";
      b.className = "chart-download";
      b.textContent = "Download " + pair[0];
      b.setAttribute("data-format", pair[0].toLowerCase());
      b.addEventListener("click", pair[1]);
      div.appendChild(b);
    });
    return div;
  }

  function size(figure) {
    var width = Math.max(260, Math.floor(figure.querySelector(".chart-plot").clientWidth));
    return {width: width, height: Math.round(Math.max(230, Math.min(360, width * 0.55)))};
  }

  function draw(figure, spec) {
    var built = build(spec);
    var holder = document.createElement("div");
    holder.className = "chart-plot";
    figure.appendChild(holder);
    var yr = yExtent(spec, built), xr = xExtent(spec, built);
    var digits = spec.y_digits || 3, yStep = 1;
    var seriesOpts = built.roles.map(function (r) {
      if (r.role === "x") return {label: spec.x_label || "x"};
      if (r.role === "hi" || r.role === "lo") {
        return {label: r.role, show: false, stroke: "transparent", width: 0, points: {show: false}};
      }
      if (r.role === "marker") {
        return {label: r.name, stroke: r.color, width: 0, paths: function () { return null; },
                points: {show: true, size: 11, width: 2, stroke: INK, fill: r.color}};
      }
      if (r.role === "badge") {
        return {label: r.name, stroke: r.color, width: 0, paths: function () { return null; },
                points: {show: true, size: 14, width: 2.5, stroke: r.color, fill: r.certified ? r.color : "#ffffff"}};
      }
      var dash = r.style === "dashed" ? [7, 4] : (r.style === "dotted" ? [2, 3] : undefined);
      return {label: r.name, stroke: r.color, width: 2, dash: dash, spanGaps: built.type !== "time",
              points: {show: true, size: 6, fill: r.color}};
    });
    var xAxis = {
      stroke: INK, font: FONT, labelFont: FONT, label: spec.x_label || "", labelSize: 18, size: 36,
      grid: {show: built.type !== "category", stroke: "#eaeef2", width: 1}, ticks: {stroke: "#8c959f", width: 1, size: 4},
      splits: function (u, i, lo, hi) {
        var px = u.bbox.width / uPlot.pxRatio;
        if (built.type === "time") return timeSplits(lo, hi, Math.max(2, Math.floor(px / 72)), spec.x_unit_days || 1).ticks;
        if (built.type === "category") {
          var n = (spec.x_ticks || []).length, longest = 1;
          (spec.x_ticks || []).forEach(function (t) { longest = Math.max(longest, String(t).length); });
          var stride = Math.max(1, Math.ceil(n / Math.max(1, Math.floor(px / (longest * 7.5 + 14)))));
          var out = [];
          for (var k = 0; k < n; k += stride) out.push(k);
          return out;
        }
        // Counts (raters, data versions) take whole-number ticks only.
        var ints = (spec.series || []).every(function (s) {
          return (s.points || []).every(function (p) { return !finite(p[0]) || Math.round(p[0]) === p[0]; });
        });
        return niceSplits(lo, hi, Math.max(2, Math.floor(px / 56)), ints);
      },
      values: function (u, splits) {
        var labels = splits.map(function (v) {
          if (built.type === "time") return timeSplits(v, v, 1, spec.x_unit_days || 1).label(v);
          if (built.type === "category") return spec.x_ticks && spec.x_ticks[v] !== undefined ? String(spec.x_ticks[v]) : "";
          return String(+v.toFixed(6));
        });
        figure.setAttribute("data-x-ticks", JSON.stringify(labels));
        return labels;
      },
    };
    var yAxis = {
      stroke: INK, font: FONT, labelFont: FONT, label: spec.y_label || "", labelSize: 18, size: 52, gap: 4,
      grid: {stroke: "#eaeef2", width: 1}, ticks: {stroke: "#8c959f", width: 1, size: 4},
      splits: function (u, i, lo, hi) {
        var s = niceSplits(lo, hi, Math.max(3, Math.floor(u.bbox.height / uPlot.pxRatio / 30)), false);
        yStep = s.length > 1 ? s[1] - s[0] : hi - lo;
        return s;
      },
      values: function (u, splits) {
        var d = Math.max(0, Math.min(digits, -Math.floor(Math.log10(yStep || 1) + 1e-9)));
        return splits.map(function (v) { return v.toFixed(d); });
      },
    };
    var tip = document.createElement("div");
    tip.className = "chart-tip";
    tip.hidden = true;
    tip.setAttribute("role", "status");
    var dims = size(figure);
    var opts = {
      width: dims.width, height: dims.height, legend: {show: false},
      cursor: {drag: {x: true, y: false, setScale: false}, focus: {prox: -1},
               points: {size: function (u, i) { return built.roles[i].role === "series" ? 9 : 0; }}},
      // x: the padded extent of the data, or the zoom chosen (uPlot's own range for a lone value
      // would span decades).
      scales: {x: {time: false, range: function () { return (zoom || xr).slice(); }}, y: {range: yr}},
      series: seriesOpts, axes: [xAxis, yAxis],
      hooks: {
        ready: [function (u) { u.over.appendChild(tip); }],
        drawAxes: [function (u) { drawBands(u, spec, built); }],
        draw: [function (u) { drawExtras(u, spec, built, figure); }],
        setCursor: [function (u) { tooltip(u, spec, built, tip); }],
        setSelect: [function (u) {
          if (u.select.width < 2) return;
          var range = [u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x")];
          u.setSelect({left: 0, top: 0, width: 0, height: 0}, false);
          zoomTo(range);
        }],
      },
    };
    var id = figure.getAttribute("data-chart");
    var zoom = readZoom(id, built.type);
    var u = new uPlot(opts, built.data, holder);
    u.over.addEventListener("mouseleave", function () { tip.hidden = true; });
    // Zoom (drag across the plot) is kept in the page's URL, so a shared link shows the same span;
    // a double click shows everything again.
    function zoomTo(range) {
      zoom = range;
      u.setScale("x", {min: (range || xr)[0], max: (range || xr)[1]});
      writeZoom(id, range, built.type);
      figure.setAttribute("data-zoom", range ? zoomText(range, built.type) : "");
    }
    u.over.addEventListener("dblclick", function () { zoomTo(null); });
    figure.setAttribute("data-zoom", zoom ? zoomText(zoom, built.type) : "");
    figure._chart = {uplot: u, roles: built.roles, spec: spec, zoomTo: zoomTo};
    u.root.querySelector("canvas").setAttribute("aria-hidden", "true");

    // The legend: one button per series (its band, if any, goes with it).
    var legend = document.createElement("ul");
    legend.className = "legend";
    built.roles.forEach(function (r, i) {
      if (r.role !== "series" && r.role !== "marker" && r.role !== "badge") return;
      var li = document.createElement("li");
      var button = document.createElement("button");
      button.type = "button";
      button.className = "legend-item legend-" + r.role;
      button.setAttribute("aria-pressed", "true");
      button.setAttribute("data-series", String(i));
      var sw = document.createElement("span");
      sw.className = "swatch" + (r.style ? " swatch-" + r.style : "") + (r.role !== "series" ? " swatch-point" : "");
      sw.style.borderColor = r.color;
      if (r.role !== "badge" || r.certified) sw.style.backgroundColor = r.color;
      button.appendChild(sw);
      button.appendChild(document.createTextNode(r.name + (r.lo !== undefined ? " (95% band)" : "")));
      button.addEventListener("click", function () {
        var show = !u.series[i].show;
        u.setSeries(i, {show: show});
        if (r.lo !== undefined) { u.setSeries(r.lo, {show: show}); u.setSeries(r.hi, {show: show}); }
        button.setAttribute("aria-pressed", show ? "true" : "false");
      });
      li.appendChild(button);
      legend.appendChild(li);
    });
    figure.appendChild(legend);
    var hint = document.createElement("p");
    hint.className = "chart-hint";
    hint.textContent = "Hover for values; drag across to zoom (kept in the link), double-click to zoom out; " +
      "the legend shows and hides series.";
    figure.appendChild(hint);
    figure.appendChild(downloads(figure, u, spec, built));

    var resize = function () {
      var d = size(figure);
      if (d.width !== u.width || d.height !== u.height) u.setSize(d);
    };
    if (window.ResizeObserver) new ResizeObserver(resize).observe(holder);
    else window.addEventListener("resize", resize);
    figure.setAttribute("data-rendered", "true");
  }

  // The chart library, served from this site beside this script (loaded only on pages with charts).
  var LIBRARY = document.currentScript ? new URL("vendor/uplot/uPlot.iife.min.js", document.currentScript.src).href : null;

  function drawAll() {
    Array.prototype.forEach.call(document.querySelectorAll("figure.chart[data-chart]"), function (fig) {
      var source = document.getElementById(fig.getAttribute("data-chart"));
      try {
        if (typeof uPlot === "undefined") throw new Error("the chart library did not load");
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

  function init() {
    if (!document.querySelector("figure.chart[data-chart]")) return;
    if (typeof uPlot !== "undefined" || !LIBRARY) { drawAll(); return; }
    var script = document.createElement("script");
    script.src = LIBRARY;
    script.onload = drawAll;
    script.onerror = drawAll;  // each chart then says it could not be drawn
    document.head.appendChild(script);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
