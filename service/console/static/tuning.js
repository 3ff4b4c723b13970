// What the tuning pages share: a tuning job's address, its objective in words, how many
// of its trials have ended, and a value as the trials' table shows it.
"use strict";

Runyard.tuning = (() => {
  function url(name, project) {
    const me = Runyard.me();
    const query = me && me.server_admin && project ? `?project=${encodeURIComponent(project)}` : "";
    return `${Runyard.base}tuning-jobs/${encodeURIComponent(name)}${query}`;
  }

  function objective(tuning) {
    return `${tuning.objective.type} ${tuning.objective.metric_name}`;
  }

  function ended(tuning) {
    const counts = tuning.training_job_counts;
    return counts.completed + counts.failed + counts.stopped;
  }

  // 6 significant digits, as `runyard tuning` prints them; none as a dash.
  function value(number) {
    return number === null || number === undefined ? "–" : String(Number(number.toPrecision(6)));
  }

  return { url, objective, ended, value };
})();
