// 2 to 4 jobs side by side: their settings, hyperparameters and last metric values, a
// row highlighted where they differ, and each metric's values overlaid in one chart.
"use strict";

(async () => {
  const me = await Runyard.signedIn();
  const { el } = Runyard;
  const root = document.getElementById("compare-page");
  const problem = document.getElementById("compare-error");
  const { COLORS } = Runyard.charts;
  const CHART_POINTS = 500;

  // ``job=name``, or for a server administrator ``job=project/name``.
  const wanted = new URLSearchParams(window.location.search).getAll("job").map((given) => {
    const [project, name] = given.includes("/") ? given.split("/", 2) : ["", given];
    return { project, name };
  });
  if (wanted.length < 2 || wanted.length > 4) {
    problem.textContent = "Compare takes 2 to 4 jobs: select them on the jobs list.";
    return;
  }

  const path = (w) => `v1/training-jobs/${encodeURIComponent(w.name)}`;
  let jobs;
  try {
    jobs = await Promise.all(wanted.map((w) => Runyard.api("GET", path(w), { query: { project: w.project } })));
  } catch (e) {
    problem.textContent = e.status === 404
      ? "One of these jobs is not there, or not one you can see."
      : Runyard.describeError(e);
    return;
  }

  document.getElementById("compared").replaceChildren(...jobs.map((job, i) =>
    el("li", {}, el("span", { class: "swatch", style: `background:${COLORS[i]}`, "aria-hidden": "true" }),
      el("a", { href: Runyard.jobUrl(job.name, me.server_admin ? job.project : ""), text: job.name }),
      ` (${job.status})`)));

  const text = (value) => (value === undefined || value === null ? "" : typeof value === "string" ? value : JSON.stringify(value));

  // One row per name; its cells the jobs' values, marked when they are not all the same.
  function table(label, names, valueOf) {
    if (!names.length) return el("p", { class: "muted", text: `None of these jobs has ${label.toLowerCase()}.` });
    const head = el("tr", {}, el("th", { scope: "col", text: "Name" }),
      ...jobs.map((job) => el("th", { scope: "col", text: job.name })));
    const rows = names.map((name) => {
      const values = jobs.map((job) => text(valueOf(job, name)));
      const differs = new Set(values).size > 1;
      return el("tr", { class: differs ? "differs" : null },
        el("th", { scope: "row" }, name, differs ? el("span", { class: "visually-hidden", text: " (differs)" }) : ""),
        ...values.map((value) => el("td", {}, el("code", { text: value }))));
    });
    return el("div", { class: "table-wrap" },
      el("table", { "aria-label": label }, el("thead", {}, head), el("tbody", {}, ...rows)));
  }

  const union = (lists) => [...new Set(lists.flat())].sort((a, b) => a.localeCompare(b));
  const settings = {
    "Instance type": (job) => job.spec.instance_type,
    "Instance count": (job) => job.spec.instance_count,
    Image: (job) => job.image,
    Distribution: (job) => Runyard.distributionName(job.spec.distribution),
    "Input channels": (job) => Object.fromEntries(Object.entries(job.spec.inputs).map(([k, c]) => [k, c.uri])),
    "Max run time (s)": (job) => job.spec.max_run,
    "Spot instances": (job) => job.spec.use_spot_instances,
    "Billable time (s)": (job) => job.billable_seconds,
  };
  document.getElementById("compare-settings").replaceChildren(
    table("Settings", Object.keys(settings), (job, name) => settings[name](job)));
  document.getElementById("compare-hyper").replaceChildren(
    table("Hyperparameters", union(jobs.map((job) => Object.keys(job.spec.hyperparameters))),
      (job, name) => job.spec.hyperparameters[name]));
  const finals = jobs.map((job) => new Map(job.final_metrics.map((m) => [m.name, m.value])));
  // Final only once every job has ended; until then some are the latest so far.
  const finalsTitle = jobs.every((job) => Runyard.TERMINAL.has(job.status))
    ? "Final metric values" : "Latest metric values";
  document.getElementById("compare-finals-h").textContent = finalsTitle;
  document.getElementById("compare-finals").replaceChildren(
    table(finalsTitle, union(finals.map((f) => [...f.keys()])),
      (job, name) => finals[jobs.indexOf(job)].get(name)));

  // -- charts: per metric, each job's first host against seconds since its first value.
  const hasCharts = root.dataset.charts === "yes" && typeof window.uPlot === "function";
  const metricNames = union(jobs.map((job) => job.spec.metric_definitions.map((d) => d.name)));
  const series = await Promise.all(jobs.map((job, i) => Runyard.api("GET", `${path(wanted[i])}/metrics`,
    { query: { project: wanted[i].project, max_points: CHART_POINTS } })
    .then((reply) => new Map(reply.metrics.map((m) => [m.name, m.points])))
    .catch(() => new Map())));

  function curve(points) {
    if (!points || !points.length) return [];
    const host = [...new Set(points.map((p) => p.host))].sort()[0];
    const mine = points.filter((p) => p.host === host);
    const first = Date.parse(mine[0].time);
    return mine.map((p) => [(Date.parse(p.time) - first) / 1000, p.value]);
  }

  for (const metric of metricNames) {
    const curves = series.map((byName) => curve(byName.get(metric)));
    const latest = jobs.map((job, i) => {
      const c = curves[i];
      return `${job.name} ${c.length ? c[c.length - 1][1] : "none"}`;
    }).join(", ");
    const plot = el("div", { role: "img", class: "plot", "aria-label": `Chart of metric ${metric}: latest ${latest}` });
    document.getElementById("compare-charts").append(
      el("figure", { class: "chart" }, el("figcaption", { text: metric }), plot));
    if (!hasCharts) {
      plot.textContent = plot.getAttribute("aria-label");
      continue;
    }
    // One x axis for every job's points, a y series per job (null where it has none).
    const xs = [...new Set(curves.flat().map(([x]) => x))].sort((a, b) => a - b);
    const at = new Map(xs.map((x, i) => [x, i]));
    const ys = curves.map((c) => {
      const y = xs.map(() => null);
      for (const [x, value] of c) y[at.get(x)] = value;
      return y;
    });
    Runyard.charts.draw({ plot }, { x: "elapsed", lines: jobs.map((job) => job.name), axis: metric },
      [xs, ...ys]);
  }
  if (!metricNames.length) {
    document.getElementById("compare-charts").replaceChildren(
      el("p", { class: "muted", text: "None of these jobs defines metrics." }));
  }
})();
