// The project's tuning jobs, newest first, a page at a time: each row from the listing
// alone (it holds the counters and the best trial), refreshed every few seconds.
"use strict";

(async () => {
  const me = await Runyard.signedIn();
  const { el } = Runyard;
  const body = document.querySelector("#tuning-jobs tbody");
  const state = document.getElementById("tuning-jobs-status");
  const filters = document.getElementById("tuning-filters");
  const pageSize = 25;

  if (me.server_admin) {
    document.getElementById("tuning-project-label").hidden = false;
    document.querySelector(".project-col").hidden = false;
  }

  const cell = (label, attributes, ...children) => el("td", { "data-label": label, ...attributes }, ...children);

  function row(tuning) {
    const cells = [
      cell("Name", { class: "name" }, el("a", { href: Runyard.tuning.url(tuning.name, tuning.project), text: tuning.name })),
    ];
    if (me.server_admin) cells.push(cell("Project", { text: tuning.project }));
    const best = tuning.best_trial;
    cells.push(
      cell("Status", {}, el("span", { class: `status status-${tuning.status}`, text: tuning.status })),
      cell("Strategy", { text: tuning.strategy }),
      cell("Objective", { text: Runyard.tuning.objective(tuning) }),
      cell("Trials", { text: `${Runyard.tuning.ended(tuning)}/${tuning.max_trials}` }),
      cell("Best", { text: best ? Runyard.tuning.value(best.objective) : "–" }),
      cell("Created", {}, el("time", { datetime: tuning.created_at, text: Runyard.when(tuning.created_at) })),
    );
    return el("tr", {}, ...cells);
  }

  async function refresh() {
    const form = new FormData(filters);
    try {
      const page = await Runyard.api("GET", "v1/tuning-jobs", {
        query: {
          status: form.get("status"),
          project: me.server_admin ? form.get("project").trim() : "",
          cursor: pages.cursor,
          limit: pageSize,
        },
      });
      body.replaceChildren(...page.items.map(row));
      pages.next = page.next_cursor;
      state.textContent = page.items.length ? "" : "No tuning jobs match.";
    } catch (e) {
      state.textContent = `Could not load tuning jobs: ${Runyard.describeError(e)}`;
    }
    pages.shown();
  }

  const pages = Runyard.cursorPages({
    filters,
    previous: document.getElementById("previous-page"),
    next: document.getElementById("next-page"),
    refresh,
  });
  Runyard.every(3, refresh);
})();
