/* torchscan-report: sortable tables in the generated site (no network, no dependencies).
   A table becomes sortable when its body holds cells with <span data-sort="number">; other columns sort as text.
   Missing numbers (data-sort="") always sort last. */
(function () {
  "use strict";
  function key(cell) {
    var marked = cell.querySelector("[data-sort]");
    if (marked) {
      var raw = marked.getAttribute("data-sort");
      return raw === "" ? null : parseFloat(raw);
    }
    return cell.textContent.trim().toLowerCase();
  }
  function compare(a, b, descending) {
    if (a === null && b === null) { return 0; }
    if (a === null) { return 1; }
    if (b === null) { return -1; }
    var order = typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
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
