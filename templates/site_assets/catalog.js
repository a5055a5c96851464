/* torchscan-report: the catalog's filter box and tag facets (no network, no dependencies; works from file://).
   The box [data-torchscan-catalog-filter] precedes the catalog table. A row is shown when every word typed appears
   in its name, tags or status, and, when tag buttons are pressed, it carries one of those tags. The table's
   header stays in view while its rows scroll (site.css), and the count says how many rows are shown. */
(function () {
  "use strict";
  function followingTable(box) {
    var tables = document.querySelectorAll("table");
    for (var i = 0; i < tables.length; i++) {
      if (box.compareDocumentPosition(tables[i]) & Node.DOCUMENT_POSITION_FOLLOWING) { return tables[i]; }
    }
    return null;
  }
  function rowRecord(row) {
    var marked = row.querySelector("[data-ts-tags]");
    var tags = marked ? marked.getAttribute("data-ts-tags").split("|") : [];
    var badge = row.querySelector(".ts-badge");
    var text = [row.cells[0].textContent, tags.join(" "), badge ? badge.textContent : ""].join(" ");
    return { row: row, tags: tags, text: text.toLowerCase() };
  }
  function matches(record, words, pressed) {
    for (var i = 0; i < words.length; i++) {
      if (record.text.indexOf(words[i]) < 0) { return false; }
    }
    if (!pressed.length) { return true; }
    return pressed.some(function (tag) { return record.tags.indexOf(tag) >= 0; });
  }
  function setup(box) {
    if (box.dataset.tsReady) { return; }
    var table = followingTable(box);
    if (!table || !table.tBodies.length) { return; }
    box.dataset.tsReady = "true";
    box.hidden = false;
    table.setAttribute("data-torchscan-catalog", "true");
    var wrapper = table.closest(".md-typeset__scrollwrap");
    if (wrapper) { wrapper.classList.add("ts-catalog-scroll"); }
    var input = box.querySelector("[data-role=catalog-filter]");
    var count = box.querySelector("[data-role=catalog-count]");
    var buttons = Array.prototype.slice.call(box.querySelectorAll("button[data-tag]"));
    function apply() {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      var pressed = buttons.filter(function (button) { return button.getAttribute("aria-pressed") === "true"; })
        .map(function (button) { return button.getAttribute("data-tag"); });
      var rows = table.tBodies[0].rows, shown = 0;
      for (var i = 0; i < rows.length; i++) {
        var visible = matches(rowRecord(rows[i]), words, pressed);
        rows[i].hidden = !visible;
        shown += visible ? 1 : 0;
      }
      count.textContent = shown.toLocaleString("en-US") + " of " + rows.length.toLocaleString("en-US") + " entries shown";
    }
    input.addEventListener("input", apply);
    buttons.forEach(function (button) {
      button.addEventListener("click", function () {
        button.setAttribute("aria-pressed", button.getAttribute("aria-pressed") === "true" ? "false" : "true");
        apply();
      });
    });
    apply();
  }
  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-torchscan-catalog-filter]"), setup);
  }
  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(init);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
