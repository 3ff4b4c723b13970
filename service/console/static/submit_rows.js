// The submit form's repeated rows (input channels, hyperparameters) and its distribution
// choice: each reads its part of the spec into inputs, and writes the inputs back into it.
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
      row.querySelector("button").textContent = `Remove ${noun.toLowerCase()} ${i + 1}`;
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

  // -- hyperparameters: a name and a value; the value read as JSON where it is JSON
  // (3, 0.1, true), else as text.
  function hyperRow(fieldset, name = "", value = "") {
    row(fieldset, "Hyperparameter", [
      part(el("input", { autocomplete: "off", value: name }), "name"),
      part(el("input", { autocomplete: "off", value: typeof value === "string" ? value : JSON.stringify(value) }), "value"),
    ]);
  }

  function readValue(text) {
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }

  function hyperparameters(fieldset) {
    const found = {};
    for (const line of list(fieldset).children) {
      const [name, value] = line.querySelectorAll("[data-part]");
      if (name.value.trim()) found[name.value.trim()] = readValue(value.value);
    }
    return found;
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

  return { hyperRow, hyperparameters, showHyperparameters, channelRow, channels, showChannels,
           distribution, modeOf };
})();
