(function () {
  "use strict";
  var body = document.getElementById("tree-body");
  var theme = document.getElementById("theme");
  if (theme) {
    theme.addEventListener("click", function () {
      var root = document.documentElement;
      var dark = root.dataset.theme ? root.dataset.theme === "dark"
        : window.matchMedia("(prefers-color-scheme: dark)").matches;
      root.dataset.theme = dark ? "light" : "dark";
    });
  }
  if (!body) { return; }
  var rows = body.rows;
  function end(row) { return +row.dataset.e; }
  function setOpen(row, open) {
    var button = row.querySelector("button.t");
    if (button) { button.setAttribute("aria-expanded", open ? "true" : "false"); button.textContent = open ? "▾" : "▸"; }
  }
  function isOpen(row) {
    var button = row.querySelector("button.t");
    return button !== null && button.getAttribute("aria-expanded") === "true";
  }
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
  body.addEventListener("click", function (event) {
    var button = event.target.closest("button.t");
    if (!button) { return; }
    var index = +button.closest("tr").dataset.i;
    if (isOpen(rows[index])) { collapse(index); } else { expand(index); }
  });
  function showDepth(depth) {
    for (var i = 0; i < rows.length; i++) {
      var d = +rows[i].dataset.d;
      rows[i].hidden = d > depth;
      setOpen(rows[i], d < depth);
    }
  }
  document.getElementById("expand-all").addEventListener("click", function () { showDepth(1e9); });
  document.getElementById("collapse-all").addEventListener("click", function () { showDepth(0); });
  var depthInput = document.getElementById("depth");
  depthInput.addEventListener("change", function () { showDepth(+depthInput.value); });
  var filter = document.getElementById("filter");
  filter.addEventListener("input", function () {
    var text = filter.value.trim().toLowerCase();
    if (!text) { showDepth(+depthInput.value); return; }
    for (var i = 0; i < rows.length; i++) {
      rows[i].hidden = rows[i].dataset.k.indexOf(text) < 0;
    }
  });
})();
