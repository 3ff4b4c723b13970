// A tuning job: where it stands, a chart of its objective over its trials, and its trials'
// table, best first by the objective (its heading turns the order around; # sorts by
// number), the best trial marked; while it runs, a Stop button (asking first). Refreshed
// every few seconds until it ends.
"use strict";

(async () => {
  const me = await Runyard.signedIn();
  const canAct = me.server_admin || me.role !== "viewer";
  const { el } = Runyard;
  const root = document.getElementById("tuning-job");
  const name = root.dataset.tuning;
  const project = new URLSearchParams(window.location.search).get("project") || "";
  const path = `v1/tuning-jobs/${encodeURIComponent(name)}`;
  const problem = document.getElementById("tuning-error");
  const hasCharts = root.dataset.charts === "yes" && typeof window.uPlot === "function";
  const chart = { plot: document.getElementById("objective-plot") };
  const sortable = [...document.querySelectorAll("#trials th[data-sort]")];
  let tuning = null;
  // The trials' order: by "objective" (best first unless turned around) or by "number".
  let sort = { column: "objective", bestFirst: true, descending: false };

  const maximize = () => tuning.objective_type === "Maximize";
  // With one training job, its metric; with several definitions, each has its own.
  const metric = () => (tuning.objective ? tuning.objective.metric_name : "objective");

  function fact(term, ...value) {
    return [el("dt", { text: term }), el("dd", {}, ...value)];
  }

  // A warm start's parents (each a link to its page) and the best trial of them and this
  // tuning job, which an IdenticalDataAndAlgorithm warm start has.
  function warmStartFacts() {
    const warm = tuning.spec.warm_start_config;
    if (!warm) return [];
    const parents = warm.parent_tuning_jobs.flatMap((name, index) => [
      index ? ", " : "",
      el("a", { href: Runyard.tuning.url(name, tuning.project), text: name }),
    ]);
    const facts = fact("Warm start", `${warm.warm_start_type} from `, ...parents);
    const overall = tuning.overall_best_trial;
    if (overall) {
      facts.push(...fact("Overall best",
        el("a", { href: Runyard.jobUrl(overall.name, tuning.project), text: overall.name }),
        ` of ${overall.tuning_job} (${Runyard.tuning.metricOf(tuning, overall.definition)} `
          + `${Runyard.tuning.value(overall.objective)})`));
    }
    return facts;
  }

  function renderFacts() {
    const spec = tuning.spec;
    const jobs = tuning.training_job_counts;
    const best = tuning.best_trial;
    const facts = [
      ...fact("Status", el("span", { class: `status status-${tuning.status}`, text: tuning.status })),
      ...fact("Project", tuning.project),
      ...fact("Strategy", `${tuning.strategy} (seed ${spec.random_seed})`),
      ...fact("Objective", Runyard.tuning.objective(tuning)),
      ...fact("Trials", `${tuning.trials.length} started, ${Runyard.tuning.ended(tuning)} ended of `
        + `${tuning.max_trials}, at most ${spec.resource_limits.max_parallel_training_jobs} at once`),
      ...fact("Training jobs", `${jobs.completed} completed, ${jobs.in_progress} in progress, `
        + `${jobs.failed} failed, ${jobs.stopped} stopped`),
      ...fact("Best trial", best
        ? el("span", {}, el("a", { href: Runyard.jobUrl(best.name, tuning.project), text: best.name }),
          ` (${Runyard.tuning.metricOf(tuning, best.definition)} ${Runyard.tuning.value(best.objective)})`)
        : "none yet"),
      ...warmStartFacts(),
      ...fact("Created", el("time", { datetime: tuning.created_at, text: Runyard.when(tuning.created_at) })),
      ...fact(Runyard.TERMINAL.has(tuning.status) ? "Ran for" : "Running for",
        Runyard.elapsed(tuning.created_at, tuning.ended_at)),
    ];
    document.getElementById("tuning-facts").replaceChildren(...facts);
    const failure = document.getElementById("tuning-failure");
    failure.hidden = !tuning.failure_reason;
    failure.querySelector("pre").textContent = tuning.failure_reason || "";
  }

  // -- the chart: each trial's objective by its number, and the best up to it --------------

  function renderChart() {
    const shown = metric();
    const trials = [...tuning.trials].sort((a, b) => a.number - b.number);
    const numbers = trials.map((t) => t.number);
    const values = trials.map((t) => (t.objective_status === "Succeeded" ? t.objective : null));
    let best = null;
    const bestSoFar = values.map((value) => {
      if (value !== null && (best === null || (maximize() ? value > best : value < best))) best = value;
      return best;
    });
    const scored = values.filter((v) => v !== null).length;
    document.getElementById("objective-caption").textContent = `${shown} (${tuning.objective_type})`;
    const label = `Chart of the objective ${shown} over ${trials.length} trials, ${scored} with a value`
      + (best === null ? "" : `: best ${Runyard.tuning.value(best)}`);
    chart.plot.setAttribute("aria-label", label);
    if (!hasCharts) {
      chart.plot.textContent = label;
      return;
    }
    Runyard.charts.draw(chart, { x: "trial", lines: [shown, "best so far"], axis: shown },
      [numbers, values, bestSoFar]);
  }

  // -- the trials' table ---------------------------------------------------------------------

  // Best first: lower for Minimize, higher for Maximize; trials without a value always after,
  // by number.
  function ordered() {
    const byNumber = (a, b) => a.number - b.number;
    if (sort.column === "number") {
      const trials = [...tuning.trials].sort(byNumber);
      return sort.descending ? trials.reverse() : trials;
    }
    const better = maximize() ? -1 : 1;
    const direction = sort.bestFirst ? better : -better;
    return [...tuning.trials].sort((a, b) => {
      const av = a.objective_status === "Succeeded" ? a.objective : null;
      const bv = b.objective_status === "Succeeded" ? b.objective : null;
      if (av === null || bv === null) return (av === null) - (bv === null) || byNumber(a, b);
      return direction * (av - bv) || byNumber(a, b);
    });
  }

  function parameters(values) {
    return Object.entries(values).map(([key, value]) =>
      `${key}=${typeof value === "number" ? Runyard.tuning.value(value) : value}`).join(" ");
  }

  function row(trial) {
    const best = tuning.best_trial && tuning.best_trial.number === trial.number;
    const objective = el("td", { class: "objective" }, Runyard.tuning.value(trial.objective));
    if (best) objective.append(" ", el("span", { class: "badge best-badge", text: "best" }));
    return el("tr", { class: best ? "best" : null, "data-trial": trial.number },
      el("td", { text: trial.number }),
      el("td", {}, el("a", { href: Runyard.jobUrl(trial.name, tuning.project), text: trial.name }),
        ...(trial.definition ? [" ", el("span", { class: "muted", text: trial.definition })] : [])),
      el("td", {}, el("span", { class: `status status-${trial.status}`, text: trial.status })),
      objective,
      el("td", {}, el("code", { text: parameters(trial.parameters) })),
      el("td", { text: Runyard.elapsed(trial.created_at, trial.ended_at) }));
  }

  function showSort() {
    // Best first reads as ascending for Minimize, descending for Maximize.
    const descending = sort.column === "objective" ? sort.bestFirst === maximize() : sort.descending;
    for (const th of sortable) {
      const mark = th.querySelector(".sort-mark");
      if (th.dataset.sort === sort.column) {
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        mark.textContent = descending ? "▼" : "▲";
      } else {
        th.removeAttribute("aria-sort");
        mark.textContent = "⇅";
      }
    }
  }

  function renderTrials() {
    document.getElementById("objective-heading").textContent =
      `${metric()} (${sort.column === "objective" && !sort.bestFirst ? "worst" : "best"} first)`;
    document.querySelector("#trials tbody").replaceChildren(...ordered().map(row));
    document.getElementById("trials-empty").textContent = tuning.trials.length
      ? "" : "No trials yet: the tuner asks for the first ones in a moment.";
    showSort();
  }

  for (const th of sortable) {
    th.querySelector("button").addEventListener("click", () => {
      const column = th.dataset.sort;
      if (column === "objective") {
        sort = { column, bestFirst: sort.column === column ? !sort.bestFirst : true, descending: false };
      } else {
        sort = { column, bestFirst: true, descending: sort.column === column ? !sort.descending : false };
      }
      if (tuning) renderTrials();
    });
  }

  // Only while it runs: a tuning job being stopped already is, and an ended one cannot be.
  function renderActions() {
    document.getElementById("tuning-actions").hidden = tuning.status !== "InProgress";
    document.getElementById("stop-tuning").disabled = !canAct;
    document.getElementById("tuning-actions-note").textContent = canAct
      ? "" : "Viewers cannot stop tuning jobs.";
  }

  document.getElementById("stop-tuning").addEventListener("click", async () => {
    const asked = await Runyard.confirmAction(`Stop ${name}?`,
      "No more trials are started, its running trials are stopped, and it ends as Stopped.",
      "Stop tuning job");
    if (!asked) return;
    const result = document.getElementById("tuning-action-result");
    try {
      await Runyard.api("POST", `${path}/stop`, { query: { project } });
      result.textContent = "Stop requested.";
    } catch (e) {
      result.textContent = `Stop failed: ${Runyard.describeError(e)}`;
    }
    await refresh();
  });

  let stopPolling = null;
  async function refresh() {
    try {
      tuning = await Runyard.api("GET", path, { query: { project } });
    } catch (e) {
      problem.textContent = e.status === 404
        ? `No tuning job named ${name} that you can see.` : Runyard.describeError(e);
      return;
    }
    problem.textContent = "";
    document.getElementById("tuning-body").hidden = false;
    renderFacts();
    renderTrials();
    renderChart();
    renderActions();
    if (Runyard.TERMINAL.has(tuning.status) && stopPolling) stopPolling();
  }
  stopPolling = Runyard.every(3, refresh);
})();
