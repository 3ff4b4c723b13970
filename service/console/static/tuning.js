// What the tuning pages share: a tuning job's address, its objective in words (and a
// trial's metric, with several training job definitions), how many
// of its trials have ended, and a value as the trials' table shows it.
"use strict";

Runyard.tuning = (() => {
  function url(name, project) {
    const me = Runyard.me();
    const query = me && me.server_admin && project ? `?project=${encodeURIComponent(project)}` : "";
    return `${Runyard.base}tuning-jobs/${encodeURIComponent(name)}${query}`;
  }

  // "Minimize loss"; with several training job definitions, each one's metric.
  function objective(tuning) {
    const [first, ...rest] = tuning.objectives;
    if (!rest.length && first.definition === null) return `${tuning.objective_type} ${first.metric_name}`;
    const metrics = tuning.objectives.map((o) => `${o.metric_name} (${o.definition})`);
    return `${tuning.objective_type} ${metrics.join(", ")}`;
  }

  // The objective metric of a trial that ran `definition` (null: the one training job).
  function metricOf(tuning, definition) {
    const found = tuning.objectives.find((o) => o.definition === definition);
    return found ? found.metric_name : "objective";
  }

  function ended(tuning) {
    const counts = tuning.training_job_counts;
    return counts.completed + counts.failed + counts.stopped;
  }

  // 6 significant digits, as `runyard tuning` prints them; none as a dash.
  function value(number) {
    return number === null || number === undefined ? "–" : String(Number(number.toPrecision(6)));
  }

  return { url, objective, metricOf, ended, value };
})();
