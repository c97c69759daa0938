// The site's own script (the page's policy allows no inline script): draws each plot from its JSON data block
// with Vega-Embed, and makes the index's tables sortable and filterable.
"use strict";

function drawPlot(el) {
  var block = document.getElementById(el.dataset.spec);
  if (!block || typeof vegaEmbed !== "function") {
    el.dataset.drawn = "error";
    el.textContent = "The plot could not be drawn: the page's Vega bundle did not load.";
    return;
  }
  var spec = JSON.parse(block.textContent);
  // ast: Vega interprets its expressions instead of compiling them with Function(), which the policy forbids.
  vegaEmbed(el, spec, {actions: false, ast: true, renderer: "svg"}).then(function () {
    var svg = el.querySelector("svg");
    if (svg) {
      svg.setAttribute("role", "img");
      svg.setAttribute("aria-label", el.getAttribute("aria-label") || "plot");
    }
    el.dataset.drawn = "1";
  }).catch(function (err) {
    el.dataset.drawn = "error";
    el.textContent = "The plot could not be drawn: " + err;
  });
}

// A run logs a dozen metrics or more: each plot is drawn when it comes near the screen, so a long page
// opens as fast as a short one.
function drawPlots() {
  var areas = document.querySelectorAll(".plot-area[data-spec]");
  if (!("IntersectionObserver" in window)) {
    areas.forEach(drawPlot);
    return;
  }
  var seen = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (e.isIntersecting) {
        seen.unobserve(e.target);
        drawPlot(e.target);
      }
    });
  }, {rootMargin: "300px 0px"});
  areas.forEach(function (el) { seen.observe(el); });
}

function cellValue(row, col, numeric) {
  var cell = row.cells[col];
  var v = cell ? (cell.dataset.v !== undefined ? cell.dataset.v : cell.textContent) : "";
  if (!numeric) return v.toLowerCase();
  return v === "" ? -Infinity : parseFloat(v);
}

function sortTable(button) {
  var table = button.closest("table");
  var body = table.tBodies[0];
  var col = parseInt(button.dataset.col, 10);
  var numeric = button.dataset.num === "1";
  var th = button.closest("th");
  var ascending = th.getAttribute("aria-sort") !== "ascending";
  table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
  th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  var rows = Array.prototype.slice.call(body.rows);
  rows.sort(function (a, b) {
    var x = cellValue(a, col, numeric), y = cellValue(b, col, numeric);
    var c = x < y ? -1 : x > y ? 1 : 0;
    return ascending ? c : -c;
  });
  rows.forEach(function (r) { body.appendChild(r); });
}

function filterTable(input) {
  var table = document.getElementById(input.dataset.table);
  var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
  Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
    var text = row.textContent.toLowerCase();
    row.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
  });
}

document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("table.sortable th button[data-col]").forEach(function (b) {
    b.addEventListener("click", function () { sortTable(b); });
  });
  document.querySelectorAll("input.filter[data-table]").forEach(function (i) {
    i.addEventListener("input", function () { filterTable(i); });
  });
  drawPlots();
});
