// A job's log: followed live from its first line, kept whole in memory, shown a page of
// lines at a time (the latest page while following; older ones on request), searchable
// across every line, and downloadable as a text file (all hosts or one).
"use strict";

Runyard.jobLogs = ({ jobPath, project }) => {
  const { el } = Runyard;
  // Lines in the page: enough to read around, few enough for the DOM to stay quick.
  const PAGE = 1000;
  const logs = document.getElementById("log-lines");
  const state = document.getElementById("log-state");
  const search = document.getElementById("log-search");
  const hostSelect = document.getElementById("log-host");
  const older = document.getElementById("log-older");
  const newer = document.getElementById("log-newer");
  const latest = document.getElementById("log-latest");
  const position = document.getElementById("log-position");
  const download = document.getElementById("log-download");
  let stream = null;
  let all = [];
  let shown = []; // the lines the search matches, in order
  let start = 0; // the index in ``shown`` of the page's first line
  let pinned = true; // showing the latest page, and moving with it

  function wanted() {
    return search.value.trim().toLowerCase();
  }

  function matches(event, term) {
    return !term || `${event.host} ${event.message}`.toLowerCase().includes(term);
  }

  function lineOf(event) {
    return el("div", { class: `line ${event.stream}` },
      el("time", { datetime: event.time, text: new Date(event.time).toISOString().replace("T", " ").replace("Z", "") }),
      el("span", { class: "host", text: event.host }),
      el("span", { class: "message", text: event.message }));
  }

  function count(n) {
    return n.toLocaleString("en-US");
  }

  function describe() {
    const end = Math.min(start + PAGE, shown.length);
    const of = wanted() ? `${count(shown.length)} matching of ${count(all.length)}` : count(all.length);
    position.textContent = shown.length ? `Lines ${count(start + 1)}–${count(end)} of ${of}` : "";
    older.disabled = start === 0;
    newer.disabled = pinned;
    latest.disabled = pinned;
  }

  function render() {
    if (pinned) start = Math.max(0, shown.length - PAGE);
    logs.replaceChildren(...shown.slice(start, start + PAGE).map(lineOf));
    describe();
  }

  function add(event) {
    all.push(event);
    if (!matches(event, wanted())) return;
    shown.push(event);
    if (!pinned) {
      describe();
      return;
    }
    const atBottom = logs.scrollHeight - logs.scrollTop - logs.clientHeight < 40;
    logs.append(lineOf(event));
    if (logs.childElementCount > PAGE) {
      logs.firstElementChild.remove();
      start += 1;
    }
    describe();
    if (atBottom) logs.scrollTop = logs.scrollHeight;
  }

  function downloadHref() {
    const url = new URL(`${Runyard.base}${jobPath}/logs/download`, window.location.href);
    if (hostSelect.value) url.searchParams.set("host", hostSelect.value);
    if (project) url.searchParams.set("project", project);
    download.href = url.pathname + url.search;
    download.textContent = hostSelect.value ? `Download ${hostSelect.value}'s log` : "Download the whole log";
  }

  function follow() {
    if (stream) stream.close();
    all = [];
    shown = [];
    pinned = true;
    render();
    downloadHref();
    const url = new URL(`${Runyard.base}${jobPath}/logs`, window.location.href);
    url.searchParams.set("follow", "true");
    if (hostSelect.value) url.searchParams.set("host", hostSelect.value);
    if (project) url.searchParams.set("project", project);
    // Same origin: the session cookie goes with it; it resumes after the last line by
    // itself (Last-Event-ID) if the connection drops.
    stream = new EventSource(url);
    state.textContent = "Following…";
    stream.addEventListener("log", (e) => add(JSON.parse(e.data)));
    stream.addEventListener("end", (e) => {
      stream.close();
      state.textContent = `The job ended (${JSON.parse(e.data).status}); all its lines are here.`;
    });
    stream.addEventListener("error", () => {
      if (stream.readyState === EventSource.CLOSED) state.textContent = "The log stream closed.";
      else state.textContent = "Reconnecting…";
    });
    stream.addEventListener("open", () => { state.textContent = "Following live."; });
  }

  hostSelect.addEventListener("change", follow);
  search.addEventListener("input", () => {
    const term = wanted();
    shown = all.filter((event) => matches(event, term));
    pinned = true;
    render();
  });
  older.addEventListener("click", () => {
    pinned = false;
    start = Math.max(0, start - PAGE);
    render();
    logs.scrollTop = logs.scrollHeight;
  });
  newer.addEventListener("click", () => {
    start += PAGE;
    pinned = start + PAGE >= shown.length;
    render();
    logs.scrollTop = 0;
  });
  latest.addEventListener("click", () => {
    pinned = true;
    render();
    logs.scrollTop = logs.scrollHeight;
  });

  // Shown again (its tab selected): at the latest line while following, which it could not
  // scroll to while hidden.
  function reveal() {
    if (pinned) logs.scrollTop = logs.scrollHeight;
  }

  return { follow, reveal };
};
