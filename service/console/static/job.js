"use strict";

(async () => {
  const me = await Runyard.signedIn();
  const { el } = Runyard;
  const root = document.getElementById("job");
  const name = root.dataset.job;
  const project = new URLSearchParams(window.location.search).get("project") || "";
  const jobPath = `v1/training-jobs/${encodeURIComponent(name)}`;
  const { TERMINAL } = Runyard;
  const canAct = me.server_admin || me.role !== "viewer";
  let job = null;
  let revealed = false;

  // -- the job itself ------------------------------------------------------------------

  function fact(term, ...value) {
    return [el("dt", { text: term }), el("dd", {}, ...value)];
  }

  // The overview's first lines: where the job is, and what it has to show for it.
  function renderStatus(place) {
    const facts = [
      ...fact("Status", el("span", { class: `status status-${job.status}`, text: job.status })),
      ...fact("Secondary status", job.secondary_status),
    ];
    if (job.pending_reason) {
      facts.push(...fact("Pending reason", job.pending_reason));
      if (place) facts.push(...fact("Place in line", place));
    }
    if (job.progress !== null) {
      const percent = Math.round(job.progress * 100);
      facts.push(...fact("Progress",
        el("progress", { max: 100, value: percent, "aria-label": "Progress" }), ` ${percent}%`));
    }
    if (job.estimated_remaining_seconds !== null) {
      facts.push(...fact("Time left", `about ${Runyard.duration(job.estimated_remaining_seconds)}`));
    }
    facts.push(...fact(TERMINAL.has(job.status) ? "Ran for" : "Running for",
      Runyard.elapsed(job.created_at, job.ended_at)));
    const download = `${Runyard.base}${jobPath}/model${
      job.project ? `?project=${encodeURIComponent(job.project)}` : ""}`;
    // A model stored uncompressed (output_compression NONE) is a prefix of files, which
    // no one download serves.
    const packed = job.spec.output_compression !== "NONE";
    facts.push(...fact("Model artifact", job.model_artifacts
      ? el("span", {}, el("code", { text: job.model_artifacts }), " ", packed
          ? el("a", { href: download, download: "", text: "Download model" })
          : "(its files, stored uncompressed)")
      : Runyard.jobTables.noModel(job)));
    document.getElementById("status-facts").replaceChildren(...facts);
  }

  function renderDetails() {
    const facts = [
      ...fact("Project", job.project),
      ...fact("Instances", `${job.spec.instance_type} × ${job.spec.instance_count}`
        + (job.spec.use_spot_instances ? " (spot)" : "")),
      ...fact("Created", el("time", { datetime: job.created_at, text: Runyard.when(job.created_at) })),
      ...fact("Backend", job.backend + (job.isolation ? ` (${job.isolation})` : "")),
      ...fact("Image", el("code", { text: job.image })),
      ...fact("Attempt", `${job.attempt} (restarts ${job.restarts}, interruptions ${job.interruptions})`),
    ];
    if (job.image_note) {
      facts.push(...fact("Image note", job.image_note));
    }
    document.getElementById("facts").replaceChildren(...facts);
  }

  function renderTimeline() {
    document.getElementById("timeline").replaceChildren(...job.transitions.map((t) =>
      el("li", {},
        el("time", { datetime: t.start_time, text: Runyard.when(t.start_time) }), " ",
        el("strong", { text: `${t.status} / ${t.secondary_status}` }),
        t.message ? el("span", { text: ` — ${t.message}` }) : "")));
  }

  function renderInstances() {
    document.querySelector("#instance-table tbody").replaceChildren(...job.instances.map((i) =>
      el("tr", {},
        el("td", { text: i.host }), el("td", { text: i.phase }),
        el("td", { text: i.exit_code ?? "" }), el("td", { text: i.message }),
        el("td", { text: Runyard.when(i.reported_at) }))));
    document.getElementById("instances-empty").textContent = job.instances.length
      ? "" : "No instance has reported yet: each does once it starts.";
  }

  function hosts() {
    return Array.from({ length: job.spec.instance_count }, (_, i) => `algo-${i + 1}`);
  }

  function renderSpec() {
    const spec = structuredClone(job.spec);
    if (!revealed) {
      for (const key of Object.keys(spec.environment || {})) spec.environment[key] = "••••••";
    }
    document.getElementById("spec").textContent = JSON.stringify(spec, null, 2);
    const reveal = document.getElementById("reveal-env");
    reveal.hidden = !Object.keys(job.spec.environment || {}).length;
    reveal.setAttribute("aria-pressed", String(revealed));
    reveal.textContent = revealed ? "Hide environment values" : "Show environment values";
  }

  function renderActions() {
    const live = !TERMINAL.has(job.status) && job.status !== "Stopping";
    const stop = document.getElementById("stop");
    stop.disabled = !canAct || !live;
    const spot = job.spec.use_spot_instances;
    document.getElementById("interrupt-controls").hidden = !spot;
    document.getElementById("interrupt").disabled = !canAct || !live;
    document.getElementById("interrupt-host").disabled = !canAct || !live;
    const select = document.getElementById("interrupt-host");
    if (!select.options.length) {
      select.replaceChildren(...hosts().map((h) => el("option", { text: h })));
    }
    const clone = new URL(`${Runyard.base}submit`, window.location.href);
    clone.searchParams.set("clone", name);
    if (project) clone.searchParams.set("project", project);
    document.getElementById("clone").href = clone.pathname + clone.search;
    document.getElementById("actions-note").textContent = canAct
      ? ""
      : "Viewers cannot stop or interrupt jobs.";
  }

  async function placeInLine() {
    if (!job.pending_reason) return null;
    const line = await Runyard.api("GET", `${jobPath}/place-in-line`, { query: { project } });
    return line.place === null
      ? null
      : `${line.place} of ${line.waiting_count} waiting for ${line.instance_type}`;
  }

  async function load() {
    try {
      job = await Runyard.api("GET", jobPath, { query: { project } });
    } catch (e) {
      if (e.status === 404) {
        document.getElementById("job-error").textContent =
          `Job not found: there is no job named ${name} that you can see.`;
        document.getElementById("job-body").hidden = true;
        return false;
      }
      document.getElementById("job-error").textContent = Runyard.describeError(e);
      return true;
    }
    document.getElementById("job-error").textContent = "";
    document.getElementById("job-body").hidden = false;
    renderStatus(await placeInLine().catch(() => null));
    renderDetails();
    renderTimeline();
    renderInstances();
    renderSpec();
    renderActions();
    Runyard.jobTables.render(job, document.getElementById("configuration-tables"));
    Runyard.jobTables.renderFailure(job, document.getElementById("failure"));
    Runyard.jobTables.renderMetrics(job, document.getElementById("latest-h"),
      document.getElementById("latest-metrics"));
    const logHost = document.getElementById("log-host");
    if (logHost.options.length === 1) {
      logHost.append(...hosts().map((h) => el("option", { text: h })));
    }
    return true;
  }

  // -- stop and interrupt ----------------------------------------------------------------

  async function act(what, path, json) {
    const result = document.getElementById("action-result");
    try {
      job = await Runyard.api("POST", path, { json, query: { project } });
      result.textContent = `${what} requested.`;
      await load();
    } catch (e) {
      result.textContent = `${what} failed: ${Runyard.describeError(e)}`;
    }
  }

  document.getElementById("stop").addEventListener("click", async () => {
    if (await Runyard.confirmAction(`Stop ${name}?`, "Its instances get a stop signal and the job ends as Stopped.", "Stop job")) {
      await act("Stop", `${jobPath}/stop`);
    }
  });
  document.getElementById("interrupt").addEventListener("click", async () => {
    const host = document.getElementById("interrupt-host").value;
    if (await Runyard.confirmAction(`Interrupt ${host} of ${name}?`,
        "A spot interruption rehearsal: the scripts get SIGTERM, then the job waits for capacity and resumes.",
        "Interrupt")) {
      await act("Interruption", `${jobPath}/instances/${encodeURIComponent(host)}/interruption`,
        { message: "interrupted from the console" });
    }
  });
  document.getElementById("reveal-env").addEventListener("click", () => {
    revealed = !revealed;
    renderSpec();
  });

  // -- logs (job_logs.js) and the tabs (tabs.js) ----------------------------------------------

  const logView = Runyard.jobLogs({ jobPath, project });
  Runyard.tabs(document.getElementById("job-tabs"), {
    hash: true,
    onSelect: (name) => {
      if (name === "logs") logView.reveal();
    },
  });

  // -- metric charts (charts.js) ---------------------------------------------------------

  const charts = new Map();
  const hasCharts = root.dataset.charts === "yes" && typeof window.uPlot === "function";
  // Points per host in a chart: about one per two pixels of its usual width.
  const CHART_POINTS = 500;

  function chartData(series) {
    // One x axis for every host's points (seconds since the epoch), a y series per host.
    const hostsSeen = [...new Set(series.points.map((p) => p.host))].sort();
    const times = [...new Set(series.points.map((p) => Date.parse(p.time) / 1000))].sort((a, b) => a - b);
    const index = new Map(times.map((t, i) => [t, i]));
    const ys = hostsSeen.map(() => times.map(() => null));
    for (const p of series.points) {
      ys[hostsSeen.indexOf(p.host)][index.get(Date.parse(p.time) / 1000)] = p.value;
    }
    return { hosts: hostsSeen, data: [times, ...ys] };
  }

  // Where each kind of metric is charted, what its charts are called, and the unit of its
  // values: a job's own metrics are whatever its script prints (no unit known), an
  // instance's are percentages (charts.js).
  const KINDS = {
    definitions: { box: "charts", title: "metric", unitOf: (metric) => ({ unit: "", axis: metric, about: "" }) },
    instance: { box: "instance-charts", title: "instance metric", unitOf: Runyard.charts.instanceUnit },
  };

  function describe(metric, series, kind) {
    const { title, unitOf } = KINDS[kind];
    const { unit, about } = unitOf(metric);
    const points = series ? series.points : [];
    const what = `Chart of ${title} ${metric}${about ? ` (${about})` : ""}`;
    if (!points.length) return `${what}: no values yet`;
    const last = points[points.length - 1];
    return `${what}: ${points.length} values, latest ${Runyard.charts.reading(last.value, unit)} on ${last.host}`;
  }

  function drawChart(metric, series, kind = "definitions") {
    const key = `${kind}:${metric}`;
    let chart = charts.get(key);
    const { unit, axis, about } = KINDS[kind].unitOf(metric);
    if (!chart) {
      const plot = el("div", { role: "img", class: "plot" });
      const caption = el("figcaption", {}, el("span", { text: metric }),
        about ? el("span", { class: "muted unit", text: ` (${about})` }) : "");
      const figure = el("figure", { class: "chart", "aria-label": metric }, caption, plot);
      document.getElementById(KINDS[kind].box).append(figure);
      chart = { plot };
      charts.set(key, chart);
    }
    chart.plot.setAttribute("aria-label", describe(metric, series, kind));
    if (!hasCharts) {
      chart.plot.textContent = describe(metric, series, kind);
      return;
    }
    const { hosts: seen, data } = chartData(series || { points: [] });
    Runyard.charts.draw(chart, { x: "time", lines: seen, unit, axis }, data);
  }

  async function loadMetrics() {
    const wanted = (job.spec.metric_definitions || []).map((d) => d.name);
    document.getElementById("metrics-empty").textContent =
      wanted.length ? "" : "This job defines no metrics (metric_definitions).";
    if (!wanted.length) return;
    // The whole run, at most a point per bucket of it per host: a week-long job's chart
    // reads its per-minute rollups, not every point.
    const { metrics } = await Runyard.api("GET", `${jobPath}/metrics`, {
      query: { project, max_points: CHART_POINTS },
    });
    const byName = new Map(metrics.map((m) => [m.name, m]));
    for (const metric of wanted) drawChart(metric, byName.get(metric));
  }

  async function loadInstanceMetrics() {
    // What each instance measures of itself (CPU, memory, disk, GPUs), a line per host.
    const { metrics } = await Runyard.api("GET", `${jobPath}/metrics`, {
      query: { project, kind: "instance", max_points: CHART_POINTS },
    });
    document.getElementById("instance-metrics-empty").textContent = metrics.length
      ? "" : "No samples yet: each instance measures itself every few seconds while it runs.";
    for (const series of metrics) drawChart(series.name, series, "instance");
  }

  // -- live ----------------------------------------------------------------------------------

  if (!(await load())) return;
  logView.follow();
  await loadMetrics().catch(() => {});
  await loadInstanceMetrics().catch(() => {});
  const stopPolling = Runyard.every(4, async () => {
    const ended = TERMINAL.has(job.status);
    await load();
    await loadMetrics().catch(() => {});
    await loadInstanceMetrics().catch(() => {});
    if (ended) stopPolling();
  }, { later: true });
})();
