/* Runs pages: uPlot charts drawn from the JSON blob of the page or of its live partial, and small form helpers. */
(function () {
  "use strict";
  var PALETTE = ["#4f46e5", "#0891b2", "#d97706", "#dc2626", "#16a34a", "#9333ea", "#db2777", "#64748b"];
  var plots = [];

  function colour(index) { return PALETTE[index % PALETTE.length]; }

  function formatValue(unit) {
    return function (self, value) {
      if (value == null) return "–";
      if (unit === "%") return (value * 100).toFixed(1) + "%";
      var abs = Math.abs(value);
      if (abs !== 0 && (abs < 0.001 || abs >= 100000)) return value.toExponential(2);
      return abs >= 100 ? value.toFixed(0) : value.toPrecision(3);
    };
  }

  // Tick labels are shorter than legend values: whole percents, and at most three significant digits.
  function axisValues(unit) {
    return function (self, ticks) {
      return ticks.map(function (tick) {
        if (unit === "%") return Math.round(tick * 100) + "%";
        var abs = Math.abs(tick);
        if (abs !== 0 && (abs < 0.01 || abs >= 100000)) return tick.toExponential(1);
        return String(Number(tick.toPrecision(3)));
      });
    };
  }

  function draw(chart, figure) {
    var target = figure.querySelector(".plot");
    target.textContent = "";
    var bars = chart.bars && window.uPlot.paths && window.uPlot.paths.bars;
    var single = chart.x.length === 1;
    var series = [{ label: "step" }].concat(chart.series.map(function (item, index) {
      return {
        label: item.label,
        stroke: colour(index),
        fill: bars ? colour(index) + "55" : undefined,
        width: 1.5,
        spanGaps: true,
        paths: bars ? window.uPlot.paths.bars({ size: [0.8, chart.x_labels ? 64 : 24] }) : undefined,
        points: { show: single || chart.x.length <= 30 },
        value: formatValue(chart.unit),
      };
    }));
    var width = Math.max(240, target.clientWidth || figure.clientWidth || 380);
    var options = {
      width: width,
      height: 170,
      series: series,
      legend: { live: true },
      cursor: { points: { size: 6 } },
      scales: { x: { time: false } },
      axes: [
        { stroke: "#6b7280", grid: { stroke: "#eef0f3" }, ticks: { stroke: "#e3e4e8" }, size: 28 },
        { stroke: "#6b7280", grid: { stroke: "#eef0f3" }, ticks: { stroke: "#e3e4e8" }, size: 56, values: axisValues(chart.unit) },
      ],
    };
    if (chart.x_labels) {
      // Categories (e.g. difficulty bands) drawn at x = 0, 1, 2...: name them on the axis and in the legend.
      var name = function (x) { return chart.x_labels[Math.round(x)] || ""; };
      options.axes[0].values = function (self, ticks) { return ticks.map(name); };
      series[0] = { label: chart.x_title || "", value: function (self, x) { return x == null ? "–" : name(x); } };
      options.axes[1].incrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];  // counts: whole ticks
    }
    if (chart.unit === "%") options.scales.y = { range: [0, 1] };
    if (single) options.scales.x.range = function (self, min, max) { return [min - 1, max + 1]; };
    if (bars && !single) {
      // Bars are centred on their bucket: leave half a bucket either side, and tick on whole buckets.
      var half = (chart.x[1] - chart.x[0]) / 2;
      options.scales.x.range = function (self, min, max) { return [min - half, max + half]; };
      options.axes[0].incrs = [half * 2, half * 4, half * 10, half * 20, half * 50, half * 100];
    }
    var data = [chart.x].concat(chart.series.map(function (item) { return item.values; }));
    plots.push(new window.uPlot(options, data, target));
  }

  function drawAll(root) {
    var blob = (root || document).querySelector("#run-charts") || document.getElementById("run-charts");
    if (!blob || !window.uPlot) return;
    plots.forEach(function (plot) { plot.destroy(); });
    plots = [];
    var spec = JSON.parse(blob.textContent);
    spec.charts.forEach(function (chart) {
      var figure = document.querySelector('[data-chart="' + chart.id + '"]');
      if (figure) draw(chart, figure);
    });
    document.querySelectorAll("[data-series]").forEach(function (swatch) {
      swatch.style.background = colour(Number(swatch.getAttribute("data-series")));
    });
  }

  function toggleKindSections() {
    var kind = document.querySelector("[data-launch-form] select[name=kind]");
    if (!kind) return;
    document.querySelectorAll("[data-launch-form] [data-kinds]").forEach(function (section) {
      section.hidden = section.getAttribute("data-kinds").split(" ").indexOf(kind.value) < 0;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawAll(document);
    toggleKindSections();
    document.addEventListener("change", function (event) {
      if (event.target.matches("[data-launch-form] select[name=kind]")) toggleKindSections();
      if (event.target.matches("[data-autosubmit]")) event.target.form.submit();
    });
    var resizeTimer;
    window.addEventListener("resize", function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () { drawAll(document); }, 150);
    });
  });
  // A swapped live partial brings empty chart slots and a fresh JSON blob: draw them again.
  document.addEventListener("htmx:afterSettle", function () {
    if (document.querySelector("[data-chart] .plot:empty")) drawAll(document);
  });
})();
