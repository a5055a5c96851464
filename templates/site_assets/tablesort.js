/* torchscan-report: sortable tables in the generated site (no network, no dependencies).
   A table becomes sortable when its body holds cells with <span data-sort="number">; other columns sort as text.
   Lower bounds (data-bound="lower") sort after exact values and missing numbers (data-sort="") last. */
(function () {
  "use strict";
  /* A cell's sort key: [tier, value]. Exact numbers are tier 0, lower bounds (data-bound="lower", shown with ≥)
     tier 1 and missing numbers tier 2, so lower bounds sort after exact values and missing ones last, in both
     directions. */
  function key(cell) {
    var marked = cell.querySelector("[data-sort]");
    if (marked) {
      var raw = marked.getAttribute("data-sort");
      if (raw === "") { return [2, null]; }
      return [marked.getAttribute("data-bound") === "lower" ? 1 : 0, parseFloat(raw)];
    }
    return [0, cell.textContent.trim().toLowerCase()];
  }
  function compare(a, b, descending) {
    if (a[0] !== b[0]) { return a[0] - b[0]; }
    if (a[1] === null || b[1] === null) { return 0; }
    var order = typeof a[1] === "number" && typeof b[1] === "number" ? a[1] - b[1]
      : String(a[1]).localeCompare(String(b[1]));
    return descending ? -order : order;
  }
  function sortBy(table, column, header) {
    var body = table.tBodies[0];
    var descending = header.getAttribute("aria-sort") === "ascending";
    var rows = Array.prototype.slice.call(body.rows).map(function (row, index) {
      return { row: row, key: key(row.cells[column]), index: index };
    });
    rows.sort(function (a, b) { return compare(a.key, b.key, descending) || a.index - b.index; });
    rows.forEach(function (item) { body.appendChild(item.row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (cell) { cell.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }
  function init() {
    var tables = document.querySelectorAll("table");
    Array.prototype.forEach.call(tables, function (table) {
      if (table.dataset.torchscanSortable || !table.tHead || !table.tBodies.length) { return; }
      if (!table.tBodies[0].querySelector("[data-sort]")) { return; }
      table.dataset.torchscanSortable = "true";
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header, column) {
        header.setAttribute("role", "button");
        header.setAttribute("tabindex", "0");
        header.title = "Sort by this column";
        header.addEventListener("click", function () { sortBy(table, column, header); });
        header.addEventListener("keydown", function (event) {
          if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sortBy(table, column, header); }
        });
      });
    });
  }
  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(init);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
