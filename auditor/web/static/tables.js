/* Sortable tables: <table class="sortable"> whose <th data-sort="number"|"text"> headings sort
 * the body by that column when clicked (again: the other way). A cell's data-sort-value, when
 * present, is what it sorts by; empty values go last either way. The heading's aria-sort says
 * how the table is sorted now.
 */
(function () {
  "use strict";

  function key(cell, type) {
    var raw = cell.hasAttribute("data-sort-value") ? cell.getAttribute("data-sort-value") : cell.textContent.trim();
    if (raw === "") return null;
    if (type === "number") {
      var n = parseFloat(raw);
      return isFinite(n) ? n : null;
    }
    return raw.toLowerCase();
  }

  function sortBy(table, th, direction) {
    var column = Array.prototype.indexOf.call(th.parentNode.children, th);
    var type = th.getAttribute("data-sort");
    var body = table.tBodies[0];
    var rows = Array.prototype.map.call(body.rows, function (row, i) {
      return {row: row, i: i, key: key(row.cells[column], type)};
    });
    var sign = direction === "descending" ? -1 : 1;
    rows.sort(function (a, b) {
      if (a.key === null || b.key === null) {
        if (a.key === b.key) return a.i - b.i;
        return a.key === null ? 1 : -1;
      }
      if (a.key < b.key) return -sign;
      if (a.key > b.key) return sign;
      return a.i - b.i;
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
    Array.prototype.forEach.call(table.tHead.querySelectorAll("th[data-sort]"), function (other) {
      if (other === th) other.setAttribute("aria-sort", direction);
      else other.removeAttribute("aria-sort");
    });
  }

  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
      if (!table.tHead || !table.tBodies.length) return;
      Array.prototype.forEach.call(table.tHead.querySelectorAll("th[data-sort]"), function (th) {
        var button = document.createElement("button");
        button.type = "button";
        button.className = "sort";
        while (th.firstChild) button.appendChild(th.firstChild);
        th.appendChild(button);
        button.addEventListener("click", function () {
          // Numbers sort lowest first on the first click (the weakest annotators on top).
          var next = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
          sortBy(table, th, next);
        });
      });
      table.setAttribute("data-sortable", "true");
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
