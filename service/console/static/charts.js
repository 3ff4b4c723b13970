// Line charts on uPlot, as the job and compare pages draw them: axes that say their unit
// and whose ticks differ as much as the values do, and a legend that names each line with
// its latest value until the pointer picks a time (uPlot's own legend reads "--" then).
"use strict";

Runyard.charts = (() => {
  const COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bf3989"];
  const HEIGHT = 240;
  const MIN_WIDTH = 260;

  // What an instance measures of itself (contract/protocol.py's InstanceMetric), as
  // SageMaker's CloudWatch publishes it: all percentages, CPU and GPU ones summed over the
  // instance's CPUs or GPUs (so above 100 with more than one).
  // ``axis`` titles the y axis; ``about`` says in full what the values are.
  const INSTANCE_UNITS = {
    CPUUtilization: { unit: "%", axis: "CPU %", about: "% of one CPU, summed over CPUs" },
    MemoryUtilization: { unit: "%", axis: "memory %", about: "% of the machine's memory" },
    DiskUtilization: { unit: "%", axis: "disk %", about: "% of the disk used" },
    GPUUtilization: { unit: "%", axis: "GPU %", about: "% of one GPU, summed over GPUs" },
    GPUMemoryUtilization: { unit: "%", axis: "GPU memory %", about: "% of GPU memory, summed over GPUs" },
  };

  function instanceUnit(metric) {
    return INSTANCE_UNITS[metric] || { unit: "", axis: metric, about: "" };
  }

  // Enough decimals that ticks ``step`` apart read differently (0.1741 and 0.1742, not
  // "0.174" twice), and no more.
  function decimalsFor(step) {
    if (!step || !Number.isFinite(step)) return 2;
    return Math.min(10, Math.max(0, Math.ceil(-Math.log10(step) - 1e-9)));
  }

  function number(value, decimals) {
    return value.toLocaleString("en-US", { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
  }

  function withUnit(text, unit) {
    return unit ? `${text} ${unit}` : text;
  }

  // A value as a legend or a chart's description gives it: 4 significant digits (0.1741,
  // 95.5, 180), whole above a thousand, with its unit.
  function reading(value, unit = "") {
    if (value === null || value === undefined) return "none";
    const text = Math.abs(value) >= 1000
      ? Math.round(value).toLocaleString("en-US") : String(Number(value.toPrecision(4)));
    return withUnit(text, unit);
  }

  function latest(values) {
    for (let i = values.length - 1; i >= 0; i -= 1) {
      if (values[i] !== null && values[i] !== undefined) return values[i];
    }
    return null;
  }

  // Whole seconds and up, so a short run's time ticks never read ":27.500".
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
    21600, 43200, 86400, 172800, 604800];

  // A tick of the time axis, as the local clock; days apart, as the date.
  function clock(seconds, step) {
    const at = new Date(seconds * 1000);
    if (step >= 86400) return at.toLocaleDateString([], { month: "short", day: "numeric" });
    return at.toLocaleTimeString([], step < 60
      ? { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" }
      : { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  }

  // An axis as wide as its longest tick (uPlot's fixed default cuts "0.1742 %" short).
  function fitTicks(u, values, axisIndex, cycle) {
    const axis = u.axes[axisIndex];
    if (cycle > 1) return axis._size;
    const longest = (values || []).reduce((a, v) => (v.length > a.length ? v : a), "");
    u.ctx.font = axis.font[0];
    return Math.ceil(axis.ticks.size + axis.gap + u.ctx.measureText(longest).width / window.devicePixelRatio);
  }

  // Whole trials, for a tuning job's objective over its trials.
  const TRIAL_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500];

  // The x axes a chart may have: its axis, the legend's name for it, and a value of it as
  // the legend reads it.
  const X_AXES = {
    time: {
      axis: { label: "Time (local)", incrs: TIME_STEPS, space: 70,
              values: (u, splits, axisIndex, space, step) => splits.map((v) => clock(v, step)) },
      label: "Time",
      reading: (value) => new Date(value * 1000).toLocaleTimeString(),
    },
    elapsed: {
      axis: { label: "Time since the first value", incrs: TIME_STEPS, space: 60,
              values: (u, splits) => splits.map((v) => Runyard.duration(v) || "0s") },
      label: "Elapsed",
      reading: (value) => Runyard.duration(value) || "0s",
    },
    trial: {
      axis: { label: "Trial", incrs: TRIAL_STEPS, space: 40,
              values: (u, splits) => splits.map((v) => String(v)) },
      label: "Trial",
      reading: (value) => `trial ${value}`,
    },
  };

  // uPlot's options for one chart. ``x``: "time" (seconds since the epoch, shown as the
  // local clock), "elapsed" (seconds since a start) or "trial" (a tuning job's trial
  // numbers); ``lines``: the series' names; ``unit`` and ``axis``: what the y values are
  // measured in, and the y axis's title.
  function options({ width, x = "time", lines, unit = "", axis = "" }) {
    const yTicks = (u, splits, axisIndex, space, step) =>
      splits.map((v) => withUnit(number(v, decimalsFor(step)), unit));
    const xKind = X_AXES[x];
    const xAxis = xKind.axis;
    const xValue = (u, value, seriesIndex, index) => {
      if (index === null || index === undefined) return "latest";
      return xKind.reading(value);
    };
    return {
      width: Math.max(width || 0, MIN_WIDTH),
      height: HEIGHT,
      scales: { x: { time: false } },
      axes: [
        xAxis,
        { label: axis, values: yTicks, size: fitTicks },
      ],
      series: [
        { label: xKind.label, value: xValue },
        ...lines.map((name, i) => ({
          label: name,
          stroke: COLORS[i % COLORS.length],
          width: 2,
          spanGaps: true,
          // The value at the pointer's time; with no pointer on the chart, the latest.
          value: (u, value, seriesIndex, index) => reading(
            index === null || index === undefined ? latest(u.data[seriesIndex]) : value, unit),
        })),
      ],
    };
  }

  // Draw (or redraw, when its lines changed) ``chart``'s plot from ``data`` and ``spec``
  // (as for ``options``); ``chart`` keeps the uPlot between calls.
  function draw(chart, spec, data) {
    const key = JSON.stringify([spec.lines, spec.unit, spec.axis]);
    if (!chart.uplot || chart.key !== key) {
      if (chart.uplot) chart.uplot.destroy();
      chart.key = key;
      chart.uplot = new window.uPlot(options({ ...spec, width: chart.plot.clientWidth }), data, chart.plot);
      fitWidth(chart);
    } else {
      chart.uplot.setData(data);
    }
    // Without a pointer on it, the legend shows each line's latest value.
    if (chart.uplot.cursor.idx === null || chart.uplot.cursor.idx === undefined) {
      chart.uplot.setLegend({ idx: null });
    }
  }

  // A chart drawn while its tab was hidden had no width to take: it takes its box's once
  // it is shown, and follows it when the window changes size.
  function fitWidth(chart) {
    if (chart.observer) return;
    chart.observer = new ResizeObserver(() => {
      const width = chart.plot.clientWidth;
      if (chart.uplot && width > 0 && Math.abs(width - chart.uplot.width) > 1) {
        chart.uplot.setSize({ width: Math.max(width, MIN_WIDTH), height: HEIGHT });
      }
    });
    chart.observer.observe(chart.plot);
  }

  return { COLORS, instanceUnit, reading, latest, decimalsFor, options, draw };
})();
