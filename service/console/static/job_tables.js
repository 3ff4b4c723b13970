// A job's configuration as tables (SageMaker's training-job page): hyperparameters, input
// channels, where its output and checkpoints go, its stopping condition and tags; and for
// its overview, its metric values, its model and why it failed, in words that fit its state.
// Every value is the job's text: set as text, never as HTML.
"use strict";

Runyard.jobTables = (() => {
  const { el } = Runyard;

  function table(label, headings, rows, empty) {
    if (!rows.length) return el("p", { class: "muted", text: empty });
    return el("div", { class: "table-wrap" },
      el("table", { "aria-label": label },
        el("thead", {}, el("tr", {}, ...headings.map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c)))))));
  }

  // A hyperparameter's value as the script gets it: text as it is, anything else as JSON.
  function shown(value) {
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function code(text) {
    return text ? el("code", { text }) : el("span", { class: "muted", text: "none" });
  }

  function seconds(value) {
    return value === null || value === undefined ? "" : `${Runyard.duration(value)} (${value} s)`;
  }

  function trainingSeconds(job) {
    if (!job.training_start_time) return null;
    const end = job.training_end_time ? new Date(job.training_end_time) : new Date();
    return Math.max(0, Math.round((end - new Date(job.training_start_time)) / 1000));
  }

  function render(job, place) {
    const spec = job.spec;
    const hyper = Object.entries(spec.hyperparameters || {}).sort(([a], [b]) => a.localeCompare(b));
    const channels = Object.entries(spec.inputs || {});
    const tags = spec.tags || [];
    const distribution = Runyard.distributionName(spec.distribution);
    place.replaceChildren(
      el("h3", { text: "Hyperparameters" }),
      table("Hyperparameters", ["Name", "Value"],
        hyper.map(([k, v]) => [k, el("code", { text: shown(v) })]), "No hyperparameters."),
      el("h3", { text: "Input channels" }),
      table("Input channels", ["Channel", "URI", "Input mode", "Distribution", "Data type", "Compression"],
        channels.map(([name, c]) => [name, code(c.uri), c.input_mode, c.distribution,
          c.s3_data_type, c.compression]), "No input channels."),
      el("h3", { text: "Output and checkpoints" }),
      table("Output and checkpoints", ["Where", "Location"], [
        ["Output path", code(spec.output_path)],
        ["Model artifact", code(job.model_artifacts)],
        ["Checkpoints (S3 URI)", code(spec.checkpoint_s3_uri)],
        ["Checkpoints on the instance", code(spec.checkpoint_local_path)],
      ], ""),
      el("h3", { text: "Resources and stopping condition" }),
      table("Resources and stopping condition", ["Setting", "Value"], [
        ["Image", code(job.image)],
        ["Instance type", spec.instance_type],
        ["Instance count", String(spec.instance_count)],
        ["Volume size", `${spec.volume_size} GB`],
        ["Distribution", el("code", { text: distribution })],
        ["Spot instances", spec.use_spot_instances ? "yes" : "no"],
        ["Max run time", seconds(spec.max_run)],
        ["Max wait time", spec.max_wait ? seconds(spec.max_wait) : "none"],
        ["Training time", seconds(trainingSeconds(job))],
        ["Billable time", seconds(job.billable_seconds)],
        ...(job.spot_savings_percent !== null
          ? [["Managed spot savings", `${job.spot_savings_percent.toFixed(1)}%`]] : []),
      ], ""),
      el("h3", { text: "Tags" }),
      table("Tags", ["Key", "Value"], tags.map((t) => [t.key, t.value]), "No tags."),
    );
  }

  // The failure reason as the job's runtime reported it: often a traceback, so kept as
  // it is, in monospace, lines and indentation intact.
  function renderFailure(job, place) {
    place.hidden = !job.failure_reason;
    place.querySelector("pre").textContent = job.failure_reason || "";
  }

  // Each metric's last value: the latest while the job runs, its final one once it ended.
  function renderMetrics(job, heading, place) {
    const ended = Runyard.TERMINAL.has(job.status);
    const title = ended ? "Final metric values" : "Latest metric values";
    heading.textContent = title;
    const defined = (job.spec.metric_definitions || []).length;
    const empty = !defined
      ? "This job defines no metrics (metric_definitions)."
      : ended ? "The job ended without printing a value of its metrics." : "No metric values yet.";
    place.replaceChildren(table(title, ["Metric", "Value", "Time"],
      (job.final_metrics || []).map((m) => [m.name, String(m.value),
        el("time", { datetime: m.time, text: Runyard.when(m.time) })]), empty));
  }

  // What a failure reason says in a line: its first, or a traceback's last (the error).
  function gist(reason) {
    const lines = reason.split("\n").map((line) => line.trim()).filter(Boolean);
    const line = lines[0] && lines[0].startsWith("Traceback") ? lines[lines.length - 1] : lines[0];
    return line && line.length > 200 ? `${line.slice(0, 199)}…` : line;
  }

  // Why a job has no model, as far as its state tells: the runtime stores one when the
  // script succeeds, and on a stop only what the script had saved; never on a failure.
  function noModel(job) {
    switch (job.status) {
      case "Completed":
        return "None was stored.";
      case "Failed":
        return "None was stored: a model is stored only when the script succeeds, and this job failed"
          + (job.failure_reason ? ` (${gist(job.failure_reason)}).` : ".");
      case "Stopped":
        return "None was stored: the job was stopped before its script saved a model.";
      default:
        return "None yet: it is stored when the script ends successfully.";
    }
  }

  return { render, renderFailure, renderMetrics, noModel };
})();
