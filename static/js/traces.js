/* Trace pages: j / k step through the filtered list in the viewer; the harness-errors chart (uPlot, counts
   per time bucket and code, drawn as bars from the page's JSON blob). */
(function () {
  "use strict";
  var PALETTE = ["#dc2626", "#d97706", "#4f46e5", "#0891b2", "#16a34a", "#9333ea", "#db2777", "#64748b"];

  function typing(target) {
    return target.closest("input, textarea, select, [contenteditable]") !== null;
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    var link = document.querySelector('[data-hotkey="' + event.key + '"]');
    if (link) { event.preventDefault(); link.click(); }
  });

  // A filter form marked data-drop-empty sends (and pushes into the URL) only the filters that are set,
  // so a shared link reads ?outcome=harness_error rather than a dozen empty parameters.
  document.addEventListener("htmx:configRequest", function (event) {
    if (event.detail.verb !== "get" || !event.detail.elt.hasAttribute("data-drop-empty")) return;
    var data = event.detail.formData;
    Array.from(new Set(data.keys())).forEach(function (key) {
      if (data.getAll(key).every(function (value) { return value === ""; })) data.delete(key);
    });
  });

  function drawHarnessChart() {
    var blob = document.getElementById("harness-chart");
    var figure = document.querySelector("[data-time-chart]");
    if (!blob || !figure || !window.uPlot) return;
    var chart = JSON.parse(blob.textContent);
    var target = figure.querySelector(".plot");
    target.textContent = "";
    var bars = window.uPlot.paths && window.uPlot.paths.bars;
    var series = [{ label: chart.unit }].concat(chart.series.map(function (item, index) {
      var colour = PALETTE[index % PALETTE.length];
      return {
        label: item.label, stroke: colour, fill: colour + "55", width: 1.5,
        paths: bars ? bars({ size: [0.8, 24] }) : undefined, points: { show: chart.x.length <= 2 },
      };
    }));
    var options = {
      width: Math.max(300, target.clientWidth || figure.clientWidth || 600),
      height: 200,
      series: series,
      scales: { x: { time: true }, y: { range: function (self, min, max) { return [0, Math.max(1, max)]; } } },
      axes: [{ stroke: "#6b7280", grid: { stroke: "#eef0f3" } }, { stroke: "#6b7280", grid: { stroke: "#eef0f3" }, size: 48 }],
    };
    if (chart.x.length === 1) {
      var step = { minute: 60, hour: 3600, day: 86400 }[chart.unit] || 60;
      options.scales.x.range = function () { return [chart.x[0] - step, chart.x[0] + step]; };
    }
    new window.uPlot(options, [chart.x].concat(chart.series.map(function (item) { return item.values; })), target);
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawHarnessChart();
    document.addEventListener("change", function (event) {
      if (event.target.matches("[data-autosubmit]")) event.target.form.submit();
    });
  });
})();
