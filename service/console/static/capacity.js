"use strict";

(async () => {
  await Runyard.signedIn();
  const { el } = Runyard;
  const root = document.getElementById("capacity");
  const state = document.getElementById("capacity-state");

  function who(held) {
    // Another project's job: its place and size show, not what it is.
    return held.name
      ? el("a", { href: Runyard.jobUrl(held.name, held.project), text: held.name })
      : el("span", { class: "muted", text: "another project's job" });
  }

  const instances = (n) => `${n} ${n === 1 ? "instance" : "instances"}`;
  const jobs = (n) => `${n} ${n === 1 ? "job" : "jobs"}`;

  // "4 of 8 instances in use", or where the type has no limit "4 instances in use (no limit)".
  function inUse(line) {
    return line.capacity === null
      ? `${instances(line.in_use)} in use (no limit)`
      : `${line.in_use} of ${instances(line.capacity)} in use`;
  }

  function section(line) {
    const running = line.running.length
      ? el("ul", {}, ...line.running.map((held) =>
          el("li", {}, who(held), ` — ${instances(held.instance_count)}`)))
      : el("p", { class: "muted", text: "Nothing running." });
    const waiting = line.waiting.length
      ? el("ol", {}, ...line.waiting.map((held) =>
          el("li", {}, who(held),
            ` — ${instances(held.instance_count)}, priority ${held.priority}: ${held.reason}`)))
      : el("p", { class: "muted", text: "Nothing waiting." });
    // A long line shows its front; the count says how long it is.
    const more = line.waiting_count - line.waiting.length;
    const rest = more > 0
      ? el("p", { class: "muted", text: `… and ${more} more behind them.` })
      : "";
    return el("section", { class: "type-line", "aria-label": `Instance type ${line.instance_type}` },
      el("h2", { text: line.instance_type }),
      el("h3", { text: `Running: ${inUse(line)}` }), running,
      el("h3", { text: `Waiting in order: ${jobs(line.waiting_count)}` }), waiting, rest);
  }

  Runyard.every(5, async () => {
    try {
      const lines = await Runyard.lines();
      root.replaceChildren(...[...lines.values()].map(section));
      state.textContent = lines.size ? "" : "No job is running or waiting.";
    } catch (e) {
      state.textContent = `Could not load capacity: ${Runyard.describeError(e)}`;
    }
  });
})();
