"use strict";

(() => {
  // Handlers are in place at once; what needs the caller waits for it.
  const signedIn = Runyard.signedIn();
  const editor = document.getElementById("spec-editor");
  const inputs = [...document.querySelectorAll("#form [data-key]")];
  const state = document.getElementById("submit-state");
  const error = document.getElementById("submit-error");
  const yaml = document.getElementById("submit").dataset.yaml === "yes" && window.jsyaml;
  const project = document.getElementById("project");

  const asJson = () => !yaml || editor.value.trim().startsWith("{");
  function parse() {
    const text = editor.value.trim();
    if (!text) return {};
    const spec = asJson() ? JSON.parse(text) : window.jsyaml.load(text);
    if (typeof spec !== "object" || spec === null || Array.isArray(spec)) {
      throw new Error("the spec must be a mapping of keys to values");
    }
    return spec;
  }
  function write(spec, json) {
    editor.value = json ? JSON.stringify(spec, null, 2) : window.jsyaml.dump(spec, { lineWidth: -1 });
  }

  // Form -> editor: the field's key is set (or removed when emptied) in the spec.
  for (const input of inputs) {
    input.addEventListener("input", () => {
      let spec;
      try {
        spec = parse();
      } catch (e) {
        error.textContent = `The spec does not parse: ${e.message}`;
        return;
      }
      const value = input.type === "number" ? Number(input.value) : input.value;
      if (input.value === "") delete spec[input.dataset.key];
      else spec[input.dataset.key] = value;
      write(spec, asJson());
      error.textContent = "";
    });
  }
  // Editor -> form.
  editor.addEventListener("input", () => {
    try {
      const spec = parse();
      for (const input of inputs) input.value = spec[input.dataset.key] ?? "";
      error.textContent = "";
    } catch (e) {
      error.textContent = `The spec does not parse: ${e.message}`;
    }
  });
  write({ entry_point: "train.py", source_uri: "", instance_type: "local", instance_count: 1 },
        !yaml);
  editor.dispatchEvent(new Event("input"));

  document.getElementById("source-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (!file) return;
    state.textContent = `Uploading ${file.name}…`;
    error.textContent = "";
    try {
      // A change needs the session's CSRF token, which arrives with who is signed in: a
      // file picked before that answer must wait for it.
      await signedIn;
      const stored = await Runyard.api("POST", "v1/sources", {
        body: file, headers: { "Content-Type": "application/gzip" },
      });
      const uri = document.getElementById("source-uri");
      uri.value = stored.source_uri;
      uri.dispatchEvent(new Event("input"));
      state.textContent = `Uploaded ${file.name}: ${stored.source_uri}`;
    } catch (e) {
      state.textContent = "";
      error.textContent = `Upload failed: ${Runyard.describeError(e)}`;
    }
  });

  async function send(dryRun) {
    const me = await signedIn;
    error.textContent = "";
    state.textContent = dryRun ? "Planning…" : "Submitting…";
    let spec;
    try {
      spec = parse();
    } catch (e) {
      state.textContent = "";
      error.textContent = `The spec does not parse: ${e.message}`;
      return;
    }
    try {
      const reply = await Runyard.api("POST", "v1/training-jobs", {
        json: spec,
        query: { dry_run: dryRun ? "true" : "", project: me.server_admin ? project.value.trim() : "" },
      });
      if (dryRun) {
        document.getElementById("plan-section").hidden = false;
        document.getElementById("plan-summary").textContent =
          `Job ${reply.name} on the ${reply.backend} backend would be created as:`;
        document.getElementById("plan").textContent = reply.rendered;
        state.textContent = "Planned; nothing was created.";
      } else {
        window.location.assign(Runyard.jobUrl(reply.name, reply.project));
      }
    } catch (e) {
      state.textContent = "";
      error.textContent = Runyard.describeError(e);
    }
  }
  document.getElementById("dry-run").addEventListener("click", () => send(true));
  document.getElementById("submit-job").addEventListener("click", () => send(false));
  signedIn.then((me) => {
    if (me.server_admin) document.getElementById("project-label").hidden = false;
    if (!me.server_admin && me.role === "viewer") {
      for (const id of ["dry-run", "submit-job", "source-file"]) {
        document.getElementById(id).disabled = true;
      }
      state.textContent = "Viewers cannot submit jobs.";
    }
  });
})();
