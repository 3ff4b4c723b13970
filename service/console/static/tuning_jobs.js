// The project's tuning jobs, newest first, a page at a time: each row from the listing
// alone (it holds the counters and the best trial), refreshed every few seconds.
"use strict";

(async () => {
  const me = await Runyard.signedIn();
  const { el } = Runyard;
  const body = document.querySelector("#tuning-jobs tbody");
  const state = document.getElementById("tuning-jobs-status");
  const filters = document.getElementById("tuning-filters");
  const previous = document.getElementById("previous-page");
  const next = document.getElementById("next-page");
  const pageSize = 25;
  let cursors = [];
  let cursor = null;
  let nextCursor = null;

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
          cursor,
          limit: pageSize,
        },
      });
      body.replaceChildren(...page.items.map(row));
      nextCursor = page.next_cursor;
      state.textContent = page.items.length ? "" : "No tuning jobs match.";
    } catch (e) {
      state.textContent = `Could not load tuning jobs: ${Runyard.describeError(e)}`;
    }
    previous.disabled = cursors.length === 0;
    next.disabled = !nextCursor;
  }

  function restart() {
    cursors = [];
    cursor = null;
    refresh();
  }

  filters.addEventListener("input", restart);
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    restart();
  });
  next.addEventListener("click", () => {
    cursors.push(cursor);
    cursor = nextCursor;
    refresh();
  });
  previous.addEventListener("click", () => {
    cursor = cursors.pop() ?? null;
    refresh();
  });
  Runyard.every(3, refresh);
})();
