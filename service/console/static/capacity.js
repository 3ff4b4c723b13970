"use strict";

(async () => {
  await Runyard.signedIn();
  const { el } = Runyard;
  const root = document.getElementById("capacity");
  const state = document.getElementById("capacity-state");

  function jobLink(job) {
    return el("a", { href: Runyard.jobUrl(job.name, job.project), text: job.name });
  }

  function section(type, line) {
    const count = (jobs) => jobs.reduce((n, j) => n + j.spec.instance_count, 0);
    const running = line.running.length
      ? el("ul", {}, ...line.running.map((j) =>
          el("li", {}, jobLink(j), ` — ${j.spec.instance_count} instance(s), ${j.secondary_status}`)))
      : el("p", { class: "muted", text: "Nothing running." });
    const waiting = line.waiting.length
      ? el("ol", {}, ...line.waiting.map((j) =>
          el("li", {}, jobLink(j),
            ` — ${j.spec.instance_count} instance(s), priority ${j.spec.priority}: ${j.pending_reason}`)))
      : el("p", { class: "muted", text: "Nothing waiting." });
    return el("section", { class: "type-line", "aria-label": `Instance type ${type}` },
      el("h2", { text: type }),
      el("h3", { text: `Running (${count(line.running)} instances)` }), running,
      el("h3", { text: `Waiting, in order (${line.waiting.length} jobs)` }), waiting);
  }

  Runyard.every(5, async () => {
    try {
      const lines = await Runyard.lines("");
      const types = [...lines.keys()].sort();
      root.replaceChildren(...types.map((t) => section(t, lines.get(t))));
      state.textContent = types.length ? "" : "No job is running or waiting.";
    } catch (e) {
      state.textContent = `Could not load capacity: ${Runyard.describeError(e)}`;
    }
  });
})();
