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
    if (tuning.objective) return `${tuning.objective.type} ${tuning.objective.metric_name}`;
    const several = (tuning.spec && tuning.spec.training_job_definitions) || [];
    const metrics = several.map((d) => `${d.objective.metric_name} (${d.definition_name})`);
    // A listing's row has no spec: each definition's metric is on the tuning job's page.
    return `${tuning.objective_type} ${metrics.join(", ") || "(each definition's metric)"}`;
  }

  // The objective metric of a trial that ran `definition` (null: the one training job).
  function metricOf(tuning, definition) {
    if (tuning.objective) return tuning.objective.metric_name;
    const several = tuning.spec.training_job_definitions || [];
    const found = several.find((d) => d.definition_name === definition);
    return found ? found.objective.metric_name : "objective";
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
