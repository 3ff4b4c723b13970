"use strict";

(async () => {
  const me = await Runyard.signedIn();
  const { el } = Runyard;
  const body = document.querySelector("#jobs tbody");
  const state = document.getElementById("jobs-status");
  const filters = document.getElementById("filters");
  const previous = document.getElementById("previous-page");
  const next = document.getElementById("next-page");
  // The cursors of the pages before this one, and this page's own.
  let cursors = [];
  let cursor = null;
  let nextCursor = null;

  if (me.server_admin) {
    document.getElementById("project-filter-label").hidden = false;
    document.querySelector(".project-col").hidden = false;
  }

  function row(job) {
    const cells = [
      el("td", {}, el("a", { href: Runyard.jobUrl(job.name, job.project), text: job.name })),
    ];
    if (me.server_admin) cells.push(el("td", { text: job.project }));
    cells.push(
      el("td", {}, el("span", { class: `status status-${job.status}`, text: job.status })),
      el("td", { text: job.secondary_status }),
      el("td", { text: `${job.instance_type} × ${job.instance_count}` }),
      el("td", {}, el("time", { datetime: job.created_at, text: Runyard.when(job.created_at) })),
      el("td", { text: Runyard.elapsed(job.created_at, job.ended_at) }),
    );
    return el("tr", {}, ...cells);
  }

  async function refresh() {
    const form = new FormData(filters);
    try {
      const page = await Runyard.api("GET", "v1/training-jobs", {
        query: {
          status: form.get("status"),
          name_prefix: form.get("name_prefix").trim(),
          project: me.server_admin ? form.get("project").trim() : "",
          cursor,
          limit: 25,
        },
      });
      body.replaceChildren(...page.items.map(row));
      nextCursor = page.next_cursor;
      state.textContent = page.items.length ? "" : "No jobs match.";
    } catch (e) {
      state.textContent = `Could not load jobs: ${Runyard.describeError(e)}`;
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
