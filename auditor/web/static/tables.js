/* Auditor's tables: a CSV download on every data table, and tables that scroll sideways
 * reachable by keyboard (and the time range picker's one convenience).
 *
 * Every <table class="data"> gets a "Download CSV" button after it: the table as shown (its
 * headings and the rows of this page), each cell's text as read on the page. A table whose
 * box scrolls sideways (its .table-wrap, or the table itself on a phone) becomes a labelled,
 * focusable region, so a keyboard user can scroll it with the arrow keys.
 * Text from the data is only ever read with textContent, never written as markup.
 */
(function () {
  "use strict";

  function text(cell) {
    var copy = cell.cloneNode(true);
    Array.prototype.forEach.call(copy.querySelectorAll("button, form, script, .visually-hidden"), function (n) { n.remove(); });
    return copy.textContent.replace(/\s+/g, " ").trim();
  }

  function csvField(value) {
    // Quoted when needed; a leading = + - @ is defused so a spreadsheet does not run it as a formula.
    var v = /^[=+\-@\t\r]/.test(value) && !/^-?\d/.test(value) ? "'" + value : value;
    return /[",\n\r]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v;
  }

  function toCsv(table) {
    var lines = [];
    Array.prototype.forEach.call(table.rows, function (row) {
      if (row.closest("table") !== table) return;
      var cells = Array.prototype.map.call(row.cells, function (c) { return csvField(text(c)); });
      if (cells.some(function (c) { return c !== ""; })) lines.push(cells.join(","));
    });
    return lines.join("\r\n") + "\r\n";
  }

  function label(table) {
    if (table.caption) return text(table.caption);
    if (table.getAttribute("aria-label")) return table.getAttribute("aria-label");
    var node = table.closest(".table-wrap") || table;
    for (var el = node.previousElementSibling; el; el = el.previousElementSibling) {
      if (/^H[1-4]$/.test(el.tagName)) return text(el);
    }
    var section = table.closest("section, details, figure");
    var heading = section && section.querySelector("h2, h3, summary, figcaption");
    return heading ? text(heading) : (table.id || "table").replace(/[-_]+/g, " ");
  }

  function addCsv(table, index) {
    var box = table.closest(".table-wrap") || table;
    if (box.nextElementSibling && box.nextElementSibling.classList.contains("table-actions")) return;
    var div = document.createElement("div");
    div.className = "table-actions";
    var button = document.createElement("button");
    button.type = "button";
    button.className = "table-csv";
    button.textContent = "Download CSV";
    // The visible words start the accessible name; which table follows for a screen reader.
    var which = document.createElement("span");
    which.className = "visually-hidden";
    which.textContent = " of the table “" + label(table) + "”";
    button.appendChild(which);
    button.addEventListener("click", function () {
      var blob = new Blob(["\ufeff" + toCsv(table)], {type: "text/csv;charset=utf-8"});
      var a = document.createElement("a");
      a.href = URL.createObjectURL(blob);
      a.download = (table.id || "table-" + index) + ".csv";
      document.body.appendChild(a);
      a.click();
      setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 0);
    });
    div.appendChild(button);
    box.parentNode.insertBefore(div, box.nextSibling);
  }

  // A box that scrolls sideways is a focusable region named after its table; one that does not is left alone.
  function reachable(table) {
    var box = table.closest(".table-wrap") || table;
    var scrolls = box.scrollWidth > box.clientWidth + 1;
    if (scrolls && !box.hasAttribute("tabindex")) {
      box.setAttribute("tabindex", "0");
      box.setAttribute("role", "region");
      box.setAttribute("aria-label", label(table) + " (scrolls sideways)");
      box.setAttribute("data-scrolls", "true");
    } else if (!scrolls && box.getAttribute("data-scrolls") === "true") {
      ["tabindex", "role", "aria-label", "data-scrolls"].forEach(function (a) { box.removeAttribute(a); });
    }
  }

  // The time range picker: typing a date chooses "custom dates" (the form works without this too).
  function rangePickers() {
    Array.prototype.forEach.call(document.querySelectorAll("form.range-pick"), function (form) {
      var select = form.querySelector("select[name=range]");
      Array.prototype.forEach.call(form.querySelectorAll("input[type=date]"), function (input) {
        input.addEventListener("change", function () { if (select) select.value = "custom"; });
      });
    });
  }

  function init() {
    rangePickers();
    var tables = Array.prototype.slice.call(document.querySelectorAll("table.data"));
    tables.forEach(addCsv);
    var check = function () { tables.forEach(reachable); };
    check();
    if (window.ResizeObserver) new ResizeObserver(check).observe(document.body);
    else window.addEventListener("resize", check);
    document.documentElement.setAttribute("data-tables-ready", "true");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
