// The submit form's repeated rows (input channels, hyperparameters, metric definitions,
// tags, environment) and its distribution choice: each reads its part of the spec into
// inputs, and writes the inputs back into it.
"use strict";

Runyard.submitRows = (() => {
  const { el } = Runyard;
  const INPUT_MODES = ["File", "FastFile", "Pipe"];
  const DISTRIBUTIONS = ["FullyReplicated", "ShardedByS3Key"];

  function choice(label, options, value) {
    const select = el("select", { "aria-label": label },
      ...options.map((o) => el("option", { text: o })));
    select.value = value || options[0];
    return select;
  }

  function list(fieldset) {
    return fieldset.querySelector(".row-list");
  }

  function renumber(fieldset, noun) {
    [...list(fieldset).children].forEach((row, i) => {
      for (const input of row.querySelectorAll("[data-part]")) {
        input.setAttribute("aria-label", `${noun} ${i + 1} ${input.dataset.part}`);
      }
      const remove = row.querySelector("button");
      remove.textContent = "Remove";
      remove.setAttribute("aria-label", `Remove ${noun.toLowerCase()} ${i + 1}`);
    });
  }

  function row(fieldset, noun, parts) {
    const remove = el("button", { type: "button", class: "remove" });
    const line = el("div", { class: "row" }, ...parts, remove);
    remove.addEventListener("click", () => {
      line.remove();
      renumber(fieldset, noun);
      fieldset.dispatchEvent(new Event("input", { bubbles: true }));
    });
    list(fieldset).append(line);
    renumber(fieldset, noun);
    return line;
  }

  function part(node, name) {
    node.dataset.part = name;
    return node;
  }

  // -- rows of two texts (a name and a value, a key and a value...).
  function pairRow(fieldset, noun, names, values = ["", ""], placeholders = ["", ""]) {
    row(fieldset, noun, names.map((name, i) =>
      part(el("input", { autocomplete: "off", value: values[i], placeholder: placeholders[i] || null }), name)));
  }

  // The rows' pairs whose first text is not blank, in order.
  function pairs(fieldset) {
    return [...list(fieldset).children]
      .map((line) => [...line.querySelectorAll("[data-part]")].map((input) => input.value))
      .map(([first, second]) => [first.trim(), second])
      .filter(([first]) => first);
  }

  // -- hyperparameters: a name and a value; the value read as JSON where it is JSON
  // (3, 0.1, true), else as text.
  function hyperRow(fieldset, name = "", value = "") {
    pairRow(fieldset, "Hyperparameter", ["name", "value"],
      [name, typeof value === "string" ? value : JSON.stringify(value)]);
  }

  function readValue(text) {
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }

  function hyperparameters(fieldset) {
    return Object.fromEntries(pairs(fieldset).map(([name, value]) => [name, readValue(value)]));
  }

  function showHyperparameters(fieldset, values) {
    list(fieldset).replaceChildren();
    for (const [name, value] of Object.entries(values || {})) hyperRow(fieldset, name, value);
  }

  // -- input channels: a name, a URI, how the instances read it and how it is split.
  function channelRow(fieldset, name = "", channel = {}) {
    row(fieldset, "Channel", [
      part(el("input", { autocomplete: "off", value: name }), "name"),
      part(el("input", { autocomplete: "off", value: channel.uri || "", placeholder: "s3://… or file://…" }), "URI"),
      part(choice("", INPUT_MODES, channel.input_mode), "input mode"),
      part(choice("", DISTRIBUTIONS, channel.distribution), "distribution"),
    ]);
  }

  // The channels the rows name; what the rows do not show of a channel (its data type,
  // compression...) is kept from ``before``.
  function channels(fieldset, before) {
    const found = {};
    for (const line of list(fieldset).children) {
      const [name, uri, mode, distribution] = line.querySelectorAll("[data-part]");
      const key = name.value.trim();
      if (!key) continue;
      found[key] = { ...((before || {})[key] || {}), uri: uri.value.trim(),
                     input_mode: mode.value, distribution: distribution.value };
    }
    return found;
  }

  function showChannels(fieldset, inputs) {
    list(fieldset).replaceChildren();
    for (const [name, channel] of Object.entries(inputs || {})) {
      // The API also takes a channel as its URI alone.
      channelRow(fieldset, name, typeof channel === "string" ? { uri: channel } : channel);
    }
  }

  // -- distribution: a mode's dotted name ("smdistributed.dataparallel") <-> the
  // estimator's nested dict ({"smdistributed": {"dataparallel": {"enabled": true}}}).
  function distribution(mode) {
    if (!mode) return {};
    const dict = {};
    let at = dict;
    const path = mode.split(".");
    path.forEach((key, i) => {
      at[key] = i === path.length - 1 ? { enabled: true } : {};
      at = at[key];
    });
    return dict;
  }

  function modeOf(dict, modes) {
    const enabled = modes.filter((mode) => {
      const options = mode.split(".").reduce((at, key) => (at && typeof at === "object" ? at[key] : undefined), dict);
      return options && options.enabled;
    });
    // modelparallel runs under mpi: the one that runs under the other is the job's mode.
    return enabled.find((mode) => mode.startsWith("smdistributed.modelparallel")) || enabled[0] || "";
  }

  // -- the other parts the form edits as rows of two texts: each with the spec's key, what
  // a row is called, its two inputs' names, and how the spec's value and the rows' pairs
  // turn into each other (an empty list of pairs leaves the key out).
  const PAIRS = {
    "metric-rows": {
      key: "metric_definitions", noun: "Metric", parts: ["name", "regex"],
      placeholders: ["loss", "loss=([0-9.]+)"],
      fromPairs: (found) => found.map(([name, regex]) => ({ name, regex })),
      toPairs: (value) => (Array.isArray(value) ? value : []).map((d) => [d.name ?? "", d.regex ?? ""]),
    },
    "tag-rows": {
      key: "tags", noun: "Tag", parts: ["key", "value"], placeholders: ["team", "vision"],
      fromPairs: (found) => found.map(([key, value]) => ({ key, value })),
      // As the API takes tags: a list of {key, value} (or SageMaker's {Key, Value}), or a mapping.
      toPairs: (value) => (Array.isArray(value)
        ? value.map((t) => [t.key ?? t.Key ?? "", t.value ?? t.Value ?? ""])
        : Object.entries(value || {}).map(([k, v]) => [k, String(v)])),
    },
    "environment-rows": {
      key: "environment", noun: "Variable", parts: ["name", "value"], placeholders: ["NCCL_DEBUG", "INFO"],
      fromPairs: (found) => Object.fromEntries(found),
      toPairs: (value) => Object.entries(value || {}).map(([k, v]) => [k, String(v)]),
    },
  };

  function readPairs(fieldset) {
    const kind = PAIRS[fieldset.id];
    const found = pairs(fieldset);
    return found.length ? kind.fromPairs(found) : undefined;
  }

  function addPair(fieldset) {
    const kind = PAIRS[fieldset.id];
    pairRow(fieldset, kind.noun, kind.parts, ["", ""], kind.placeholders);
  }

  function showPairs(fieldset, value) {
    const kind = PAIRS[fieldset.id];
    list(fieldset).replaceChildren();
    for (const values of kind.toPairs(value)) pairRow(fieldset, kind.noun, kind.parts, values, kind.placeholders);
  }

  return { hyperRow, hyperparameters, showHyperparameters, channelRow, channels, showChannels,
           distribution, modeOf, PAIRS, readPairs, addPair, showPairs };
})();
