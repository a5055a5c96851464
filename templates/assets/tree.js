/* torchscan-report: the collapsible layer tree (standalone reports and site pages; no network, no dependencies).
   Every element with [data-ts-tree] holds controls and a table whose rows carry their tree position (data-i), one
   past their last descendant (data-e), depth (data-d), parent position (data-p) and search key (data-k). */
(function () {
  "use strict";
  function setOpen(row, open) {
    var button = row.querySelector("button.ts-toggle");
    if (button) { button.setAttribute("aria-expanded", open ? "true" : "false"); button.textContent = open ? "▾" : "▸"; }
  }
  function isOpen(row) {
    var button = row.querySelector("button.ts-toggle");
    return button !== null && button.getAttribute("aria-expanded") === "true";
  }
  function setup(tree) {
    if (tree.dataset.tsReady) { return; }
    tree.dataset.tsReady = "true";
    var rows = tree.querySelector("tbody").rows;
    var depthInput = tree.querySelector("[data-role=depth]");
    var filter = tree.querySelector("[data-role=filter]");
    var count = tree.querySelector("[data-role=count]");
    var total = count ? count.textContent : "";
    function end(row) { return +row.dataset.e; }
    function collapse(index) {
      var row = rows[index], stop = end(row);
      for (var j = index + 1; j < stop; j++) { rows[j].hidden = true; }
      setOpen(row, false);
    }
    function expand(index) {
      var row = rows[index], stop = end(row), j = index + 1;
      setOpen(row, true);
      while (j < stop) {
        rows[j].hidden = false;
        j = isOpen(rows[j]) ? j + 1 : end(rows[j]);
      }
    }
    function clearMarks() {
      for (var i = 0; i < rows.length; i++) { rows[i].classList.remove("ts-match", "ts-context"); }
      if (count) { count.textContent = total; }
    }
    function showDepth(depth) {
      clearMarks();
      for (var i = 0; i < rows.length; i++) {
        var d = +rows[i].dataset.d;
        rows[i].hidden = d > depth;
        setOpen(rows[i], d < depth);
      }
    }
    function applyFilter(text) {
      clearMarks();
      var shown = new Array(rows.length), opened = new Array(rows.length), matches = 0, i;
      for (i = 0; i < rows.length; i++) {
        if (rows[i].dataset.k.indexOf(text) < 0) { continue; }
        matches++;
        rows[i].classList.add("ts-match");
        shown[i] = true;
        for (var p = rows[i].dataset.p; p !== "" && !opened[+p]; p = rows[+p].dataset.p) {
          opened[+p] = true;  /* the parent path stays visible, unfolded */
          if (!shown[+p]) { shown[+p] = true; rows[+p].classList.add("ts-context"); }
        }
      }
      for (i = 0; i < rows.length; i++) {
        rows[i].hidden = !shown[i];
        setOpen(rows[i], !!opened[i]);
      }
      if (count) { count.textContent = matches.toLocaleString("en-US") + " of " + total; }
    }
    tree.querySelector("tbody").addEventListener("click", function (event) {
      var button = event.target.closest("button.ts-toggle");
      if (!button) { return; }
      var index = +button.closest("tr").dataset.i;
      if (isOpen(rows[index])) { collapse(index); } else { expand(index); }
    });
    var table = tree.querySelector("table.ts-tree-table");
    var wrap = tree.querySelector(".ts-tree-wrap");
    var hiddenCount = tree.querySelector("[data-role=hidden-count]");
    var boxes = Array.prototype.slice.call(tree.querySelectorAll("input[data-col]"));
    function showColumn(box, shown) {  /* the chooser's header says how many columns are hidden */
      box.checked = shown;
      table.classList.toggle("ts-hide-" + box.dataset.col, !shown);
      var hidden = boxes.filter(function (item) { return !item.checked; }).length;
      if (hiddenCount) { hiddenCount.textContent = hidden ? " (" + hidden + " hidden)" : ""; }
    }
    function fit() {  /* too wide for the page: hide the visible columns of lowest priority first (down to 80) */
      var shown = boxes.filter(function (box) { return box.checked && +box.dataset.priority < 80; });
      shown.sort(function (a, b) { return a.dataset.priority - b.dataset.priority; });
      for (var k = 0; k < shown.length && wrap.scrollWidth > wrap.clientWidth + 1; k++) { showColumn(shown[k], false); }
    }
    boxes.forEach(function (box) {
      box.addEventListener("change", function () { showColumn(box, box.checked); });
    });
    if (wrap && wrap.clientWidth) { fit(); }
    tree.querySelector("[data-action=expand]").addEventListener("click", function () { showDepth(1e9); });
    tree.querySelector("[data-action=collapse]").addEventListener("click", function () { showDepth(0); });
    depthInput.addEventListener("change", function () { showDepth(+depthInput.value); });
    filter.addEventListener("input", function () {
      var text = filter.value.trim().toLowerCase();
      if (text) { applyFilter(text); } else { showDepth(+depthInput.value); }
    });
  }
  function init() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-ts-tree]"), setup);
    var theme = document.getElementById("theme");
    if (theme && !theme.dataset.tsReady) {
      theme.dataset.tsReady = "true";
      theme.addEventListener("click", function () {
        var root = document.documentElement;
        var dark = root.dataset.theme ? root.dataset.theme === "dark"
          : window.matchMedia("(prefers-color-scheme: dark)").matches;
        root.dataset.theme = dark ? "light" : "dark";
      });
    }
  }
  if (window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(init);  /* Material's instant navigation swaps pages without a load event */
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
