"use strict";

(async () => {
  const me = await Runyard.signedIn();
  const { el } = Runyard;
  const body = document.querySelector("#jobs tbody");
  const state = document.getElementById("jobs-status");
  const filters = document.getElementById("filters");
  const pageSize = 25;
  // Jobs picked for comparison, kept across refreshes and pages.
  const MAX_COMPARED = 4;
  const picked = new Set();
  const compare = document.getElementById("compare");
  const compareNote = document.getElementById("compare-note");

  if (me.server_admin) {
    document.getElementById("project-filter-label").hidden = false;
    document.querySelector(".project-col").hidden = false;
  }

  // A job is picked by its name within its project (a server administrator's list mixes them).
  const key = (job) => JSON.stringify([job.project, job.name]);

  function showPicked() {
    compare.disabled = picked.size < 2 || picked.size > MAX_COMPARED;
    compareNote.textContent = picked.size > MAX_COMPARED
      ? `${picked.size} selected: compare at most ${MAX_COMPARED}.`
      : `${picked.size} selected; select 2 to ${MAX_COMPARED} jobs to compare.`;
  }

  function pick(job) {
    const box = el("input", { type: "checkbox", "aria-label": `Select ${job.name} to compare` });
    box.checked = picked.has(key(job));
    box.addEventListener("change", () => {
      if (box.checked) picked.add(key(job));
      else picked.delete(key(job));
      showPicked();
    });
    return box;
  }

  // Each cell says what it holds, for the narrow layout where a row becomes a card.
  const cell = (label, attributes, ...children) => el("td", { "data-label": label, ...attributes }, ...children);

  function row(job) {
    const cells = [
      cell("Compare", { class: "pick" }, pick(job)),
      cell("Name", { class: "name" }, el("a", { href: Runyard.jobUrl(job.name, job.project), text: job.name })),
    ];
    if (me.server_admin) cells.push(cell("Project", { text: job.project }));
    cells.push(
      cell("Status", {}, el("span", { class: `status status-${job.status}`, text: job.status })),
      cell("Secondary status", { text: job.secondary_status }),
      cell("Instances", { text: `${job.instance_type} × ${job.instance_count}` }),
      cell("Created", {}, el("time", { datetime: job.created_at, text: Runyard.when(job.created_at) })),
      cell("Duration", { text: Runyard.elapsed(job.created_at, job.ended_at) }),
    );
    return el("tr", {}, ...cells);
  }

  // -- sorting: by the headings the API can order by (name, creation time), kept in step
  // with the "Sort by" choice (the only one a phone's card layout shows). A heading says
  // its order with aria-sort (WAI-ARIA's sortable table); a click sorts by it, or turns
  // its order around.
  const sortChoice = filters.elements.sort;
  const sortable = [...document.querySelectorAll("#jobs th[data-sort]")];
  // A column's first order when chosen: names A to Z, times newest first.
  const FIRST = { name: "name", created_at: "-created_at" };

  function showSort() {
    const sort = sortChoice.value;
    for (const th of sortable) {
      const column = th.dataset.sort;
      const mark = th.querySelector(".sort-mark");
      if (sort.replace(/^-/, "") === column) {
        const descending = sort.startsWith("-");
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        mark.textContent = descending ? "▼" : "▲";
      } else {
        th.removeAttribute("aria-sort");
        mark.textContent = "⇅";
      }
    }
  }

  for (const th of sortable) {
    th.querySelector("button").addEventListener("click", () => {
      const column = th.dataset.sort;
      const sort = sortChoice.value;
      sortChoice.value = sort.replace(/^-/, "") === column
        ? (sort.startsWith("-") ? column : `-${column}`) : FIRST[column];
      sortChoice.dispatchEvent(new Event("input", { bubbles: true }));
    });
  }

  // How many jobs the page shows, and which of the list they are: the API pages by cursor
  // and does not count the whole list, so past one page the count is the page's.
  function showCount(shown) {
    const before = pages.before.length;
    const first = pageSize * before + 1;
    const last = first + shown - 1;
    const jobs = `${shown} ${shown === 1 ? "job" : "jobs"}`;
    let text;
    if (!shown) text = before ? "No more jobs." : "0 jobs";
    else if (!before && !pages.next) text = jobs;
    else text = `${jobs} on page ${before + 1} (${shown === 1 ? first : `${first}–${last}`})`
      + (pages.next ? "; more on the next page" : "");
    const count = document.getElementById("jobs-count");
    // Rewritten only when it changes: the list refreshes every few seconds.
    if (count.textContent !== text) count.textContent = text;
  }

  // A datetime-local field's value is the browser's local time: sent with its zone.
  function instant(value) {
    return value ? new Date(value).toISOString() : "";
  }

  async function refresh() {
    const form = new FormData(filters);
    try {
      const page = await Runyard.api("GET", "v1/training-jobs", {
        query: {
          status: form.get("status"),
          name_contains: form.get("name_contains").trim(),
          created_after: instant(form.get("created_after")),
          created_before: instant(form.get("created_before")),
          tag: form.get("tag").trim(),
          sort: form.get("sort"),
          project: me.server_admin ? form.get("project").trim() : "",
          cursor: pages.cursor,
          limit: pageSize,
        },
      });
      body.replaceChildren(...page.items.map(row));
      pages.next = page.next_cursor;
      showCount(page.items.length);
      state.textContent = page.items.length ? "" : "No jobs match.";
    } catch (e) {
      state.textContent = `Could not load jobs: ${Runyard.describeError(e)}`;
    }
    pages.shown();
  }

  const pages = Runyard.cursorPages({
    filters,
    previous: document.getElementById("previous-page"),
    next: document.getElementById("next-page"),
    refresh,
    restarted: showSort,
  });
  compare.addEventListener("click", () => {
    const jobs = [...picked].map((k) => JSON.parse(k));
    const url = new URL(`${Runyard.base}compare`, window.location.href);
    for (const [project, name] of jobs) {
      url.searchParams.append("job", me.server_admin ? `${project}/${name}` : name);
    }
    window.location.assign(url.pathname + url.search);
  });
  showPicked();
  showSort();
  Runyard.every(3, refresh);
})();
