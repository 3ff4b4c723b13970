// Shared by every page: where the API is, who is signed in, and requests that carry the
// session cookie (and, for changes, the CSRF token, which lives only in this page's memory).
"use strict";

const Runyard = (() => {
  const base = document.querySelector('meta[name="runyard-base"]').content;
  let me = null;

  class ApiError extends Error {
    constructor(status, detail) {
      super(typeof detail === "string" ? detail : JSON.stringify(detail));
      this.status = status;
      this.detail = detail;
    }
  }

  function toSignIn() {
    window.location.assign(base + "sign-in");
  }

  async function api(method, path, { json, body, headers = {}, query } = {}) {
    const url = new URL(base + path, window.location.href);
    for (const [key, value] of Object.entries(query || {})) {
      if (value !== null && value !== undefined && value !== "") url.searchParams.set(key, value);
    }
    const sent = { ...headers };
    if (method !== "GET" && me && me.csrf_token) sent["X-CSRF-Token"] = me.csrf_token;
    if (json !== undefined) {
      sent["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    }
    const response = await fetch(url, { method, headers: sent, body, credentials: "same-origin" });
    if (response.status === 401 && path !== "v1/session") {
      // Signed out (or the token was revoked): to sign-in, and this request never ends.
      toSignIn();
      return new Promise(() => {});
    }
    const text = await response.text();
    const data = text ? JSON.parse(text) : null;
    if (!response.ok) throw new ApiError(response.status, data && data.detail);
    return data;
  }

  // Who is signed in; every page but sign-in calls this first and goes to sign-in on 401.
  async function signedIn() {
    me = await api("GET", "v1/me");
    const who = document.getElementById("who");
    if (who) {
      const scope = me.server_admin ? "server administrator" : `${me.role} in ${me.project}`;
      who.textContent = `${me.name} (${scope})`;
    }
    return me;
  }

  async function signOut() {
    try {
      await api("DELETE", "v1/session");
    } finally {
      me = null;
      toSignIn();
    }
  }

  // An API error in words. A refused field (FastAPI's and Runyard's 422: a list of {loc,
  // msg}) is named by ``field(path)``, given the path within the request's body or query
  // ("entry_point", "metric_definitions", 0, "regex"); by default, the path in dots.
  function describeError(error, { field = (path) => path.join(".") } = {}) {
    if (Array.isArray(error.detail)) {
      return error.detail.map((e) => {
        const path = (e.loc || []).filter((part, i) => !(i === 0 && ["body", "query", "path"].includes(part)));
        return path.length ? `${field(path)}: ${e.msg}` : e.msg;
      }).join("; ");
    }
    return error.message;
  }

  function el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function when(iso) {
    return iso ? new Date(iso).toLocaleString() : "";
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined || seconds < 0) return "";
    seconds = Math.round(seconds);
    const h = Math.floor(seconds / 3600);
    const m = Math.floor((seconds % 3600) / 60);
    const s = seconds % 60;
    return h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
  }

  function elapsed(start, end) {
    return duration(((end ? new Date(end) : new Date()) - new Date(start)) / 1000);
  }

  function jobUrl(name, project) {
    const query = me && me.server_admin && project ? `?project=${encodeURIComponent(project)}` : "";
    return `${base}jobs/${encodeURIComponent(name)}${query}`;
  }

  // Every few seconds while the page is shown (first at once, unless ``later``); a
  // failure is reported by the task itself and the next round still comes.
  function every(seconds, task, { later = false } = {}) {
    let timer = null;
    let stopped = false;
    const run = async () => {
      try {
        await task();
      } finally {
        if (!stopped) timer = setTimeout(run, seconds * 1000);
      }
    };
    if (later) timer = setTimeout(run, seconds * 1000);
    else run();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }

  const signOutButton = document.getElementById("sign-out");
  if (signOutButton) signOutButton.addEventListener("click", signOut);

  return { base, api, signedIn, describeError, el, when, duration, elapsed, jobUrl, every,
           ApiError, me: () => me };
})();

// A list the API pages by cursor, with its filters' form and previous/next buttons:
// `before` holds the cursors of the pages before this one, `cursor` this page's own and
// `next` the one the API gave for the next page. A change of the filters starts again
// from the first page (`restarted` runs first); `shown()` sets the buttons once a page
// is shown (or could not be).
Runyard.cursorPages = ({ filters, previous, next, refresh, restarted = () => {} }) => {
  const pages = { before: [], cursor: null, next: null };
  pages.shown = () => {
    previous.disabled = pages.before.length === 0;
    next.disabled = !pages.next;
  };
  function restart() {
    restarted();
    pages.before = [];
    pages.cursor = null;
    refresh();
  }
  filters.addEventListener("input", restart);
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    restart();
  });
  next.addEventListener("click", () => {
    pages.before.push(pages.cursor);
    pages.cursor = pages.next;
    refresh();
  });
  previous.addEventListener("click", () => {
    pages.cursor = pages.before.pop() ?? null;
    refresh();
  });
  return pages;
};

// Whether the user confirms an action that cannot be undone (a stop, say), asked in the
// page's dialog (templates/confirm.html): resolves true for its OK button, false for
// Cancel or Escape.
Runyard.confirmAction = (title, text, ok) => {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = ok;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
};

// The statuses a job ends in: nothing about it changes after one.
Runyard.TERMINAL = new Set(["Completed", "Failed", "Stopped"]);

// The line per instance type, from the server's capacity overview: the jobs holding
// instances, and those waiting in the order they would start, each with why it waits.
// Another project's jobs keep their place but come without a name.
Runyard.lines = async () => {
  const overview = await Runyard.api("GET", "v1/capacity");
  return new Map(overview.types.map((line) => [line.instance_type, line]));
};

// A job's distribution as people name it: the enabled mode's dotted name and its options
// ("mpi {processes_per_host: 2}"), or none. The API writes every mode it knows, most null.
Runyard.distributionName = (distribution) => {
  const found = [];
  const walk = (node, path) => {
    if (!node || typeof node !== "object") return;
    if (node.enabled) {
      const options = Object.fromEntries(Object.entries(node)
        .filter(([key, value]) => key !== "enabled" && value !== null));
      found.push(path.join(".") + (Object.keys(options).length ? ` ${JSON.stringify(options)}` : ""));
      return;
    }
    for (const [key, value] of Object.entries(node)) walk(value, [...path, key]);
  };
  walk(distribution, []);
  return found.length ? found.join(" and ") : "none (one process per host)";
};
