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
  const rows = Runyard.submitRows;
  const hyperFields = document.getElementById("hyper-rows");
  const channelFields = document.getElementById("channel-rows");
  const distribution = document.getElementById("distribution");
  const modes = [...distribution.options].map((o) => o.value).filter(Boolean);
  const typeSelect = document.getElementById("instance-type");
  const asked = new URLSearchParams(window.location.search);

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

  // Form -> editor: a change to a part of the form rewrites that part of the spec only.
  function edit(change) {
    let spec;
    try {
      spec = parse();
    } catch (e) {
      error.textContent = `The spec does not parse: ${e.message}`;
      return;
    }
    change(spec);
    write(spec, asJson());
    error.textContent = "";
  }
  // A field's value as the spec holds it; a field emptied (or a box unticked) leaves its
  // key out of the spec, for the server's default.
  function valueOf(input) {
    if (input.type === "checkbox") return input.checked ? true : undefined;
    if (input.value === "") return undefined;
    return input.type === "number" ? Number(input.value) : input.value;
  }
  function showValue(input, value) {
    if (input.type === "checkbox") input.checked = value === true;
    else input.value = value ?? "";
  }
  for (const input of inputs) {
    input.addEventListener("input", () => edit((spec) => {
      const value = valueOf(input);
      if (value === undefined) delete spec[input.dataset.key];
      else spec[input.dataset.key] = value;
    }));
  }
  function setPart(spec, key, value) {
    if (Object.keys(value).length) spec[key] = value;
    else delete spec[key];
  }
  hyperFields.addEventListener("input", () => edit((spec) =>
    setPart(spec, "hyperparameters", rows.hyperparameters(hyperFields))));
  channelFields.addEventListener("input", () => edit((spec) =>
    setPart(spec, "inputs", rows.channels(channelFields, spec.inputs))));
  distribution.addEventListener("input", () => edit((spec) =>
    setPart(spec, "distribution", rows.distribution(distribution.value))));
  document.getElementById("add-hyperparameter").addEventListener("click", () => {
    rows.hyperRow(hyperFields);
    hyperFields.querySelector(".row:last-child input").focus();
  });
  document.getElementById("add-channel").addEventListener("click", () => {
    rows.channelRow(channelFields);
    channelFields.querySelector(".row:last-child input").focus();
  });
  // Metric definitions, tags and environment: rows of two texts each.
  const pairFields = Object.keys(rows.PAIRS).map((id) => document.getElementById(id));
  for (const fieldset of pairFields) {
    fieldset.addEventListener("input", () => edit((spec) => {
      const value = rows.readPairs(fieldset);
      if (value === undefined) delete spec[rows.PAIRS[fieldset.id].key];
      else spec[rows.PAIRS[fieldset.id].key] = value;
    }));
    fieldset.querySelector(".add-pair").addEventListener("click", () => {
      rows.addPair(fieldset);
      fieldset.querySelector(".row:last-child input").focus();
    });
  }

  // The spec may name a type this server does not offer: shown, and said so.
  function offerType(name) {
    if (!name || [...typeSelect.options].some((o) => o.value === name)) return;
    typeSelect.append(Runyard.el("option", { value: name, text: `${name} (not offered here)` }));
  }

  // Editor -> form.
  editor.addEventListener("input", () => {
    try {
      const spec = parse();
      offerType(spec.instance_type);
      for (const input of inputs) showValue(input, spec[input.dataset.key]);
      rows.showHyperparameters(hyperFields, spec.hyperparameters);
      for (const fieldset of pairFields) rows.showPairs(fieldset, spec[rows.PAIRS[fieldset.id].key]);
      rows.showChannels(channelFields, spec.inputs);
      distribution.value = rows.modeOf(spec.distribution || {}, modes);
      error.textContent = "";
    } catch (e) {
      error.textContent = `The spec does not parse: ${e.message}`;
    }
  });

  // The instance types this server offers, with their size.
  async function loadTypes() {
    await signedIn;
    const offer = await Runyard.api("GET", "v1/instance-types");
    const chosen = typeSelect.value;
    typeSelect.replaceChildren(...offer.types.map((t) => {
      const size = [t.vcpus && `${t.vcpus} vCPU`, t.memory_gib && `${t.memory_gib} GiB`,
        t.gpus && `${t.gpus} × ${t.gpu_model || "GPU"}`].filter(Boolean).join(", ");
      return Runyard.el("option", { value: t.name, text: `${t.name} (${t.backend}${size ? `; ${size}` : ""})` });
    }));
    offerType(chosen);
    typeSelect.value = chosen;
    document.getElementById("instance-count").max = offer.max_instance_count;
  }
  loadTypes().catch((e) => { error.textContent = `Could not list instance types: ${Runyard.describeError(e)}`; });

  // Clone: the form starts from another job's spec, less what the server chose for it.
  async function cloneFrom(name) {
    await signedIn;
    try {
      const spec = await Runyard.api("GET", `v1/training-jobs/${encodeURIComponent(name)}/clone`,
        { query: { project: asked.get("project") } });
      write(spec, !yaml);
      editor.dispatchEvent(new Event("input"));
      state.textContent = `Cloned from ${name}: give the copy a name.`;
    } catch (e) {
      error.textContent = `Could not clone ${name}: ${Runyard.describeError(e)}`;
    }
  }
  write({ entry_point: "train.py", source_uri: "", instance_type: "local", instance_count: 1 },
        !yaml);
  editor.dispatchEvent(new Event("input"));
  if (asked.get("clone")) cloneFrom(asked.get("clone"));
  if (asked.get("project")) project.value = asked.get("project");

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

  // -- a refused field, named as the form names it ("Entry point: Field required",
  // "Metric definitions, row 1, regex: ...") and the spec's key where the form has no field.
  const labels = new Map();
  for (const input of document.querySelectorAll("#form [data-key], #distribution")) {
    const label = input.closest("label");
    const words = [...label.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE)
      .map((n) => n.textContent.trim()).join(" ").trim();
    labels.set(input.dataset.key || input.id, input.dataset.label || words);
  }
  for (const fieldset of document.querySelectorAll("#form [data-rows-key]")) {
    labels.set(fieldset.dataset.rowsKey, fieldset.querySelector("legend").textContent.trim());
  }
  function fieldName(path) {
    // pydantic names the member of a union it tried ("list[Tag]", "function-after[...]"):
    // not the user's words.
    const [key, ...rest] = path.filter((part) => typeof part === "number" || !/[[(]/.test(part));
    const name = labels.get(key) || key;
    const where = rest.map((part) => (typeof part === "number" ? `row ${part + 1}` : part));
    return where.length ? `${name}, ${where.join(", ")}` : name;
  }

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
        // The job as it would be stored (every default filled, the image chosen, its
        // hosts), as YAML where the page has js-yaml; the backend's plan in its own tab.
        const resolved = { name: reply.name, backend: reply.backend, hosts: reply.hosts, spec: reply.spec };
        document.getElementById("resolved").textContent = window.jsyaml
          ? window.jsyaml.dump(resolved, { sortKeys: false, lineWidth: -1 })
          : JSON.stringify(resolved, null, 2);
        document.getElementById("plan").textContent = reply.rendered;
        state.textContent = "Planned; nothing was created.";
      } else {
        window.location.assign(Runyard.jobUrl(reply.name, reply.project));
      }
    } catch (e) {
      state.textContent = "";
      error.textContent = Runyard.describeError(e, { field: fieldName });
    }
  }
  // The dry run's tabs (tabs.js): the job as it would be stored, and the backend's plan.
  Runyard.tabs(document.querySelector('#plan-section [role="tablist"]'));
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
