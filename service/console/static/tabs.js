// Tabs as WAI-ARIA's tabs pattern (https://www.w3.org/WAI/ARIA/apg/patterns/tabs/): a
// tablist of buttons, each controlling one tabpanel; a click or Enter selects, the arrow
// keys, Home and End move between tabs and select as they go (automatic activation); only
// the selected tab is in the Tab order. With ``hash``, each tab's ``data-hash`` is its
// address: the selected tab is in the page's URL, so a link (or a reload) opens it.
"use strict";

Runyard.tabs = (tablist, { hash = false, onSelect = () => {} } = {}) => {
  const tabs = [...tablist.querySelectorAll('[role="tab"]')];
  const panelOf = (tab) => document.getElementById(tab.getAttribute("aria-controls"));
  const byHash = (text) => tabs.find((tab) => tab.dataset.hash === text.replace(/^#/, ""));

  function show(chosen, { focus = false } = {}) {
    for (const tab of tabs) {
      const on = tab === chosen;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      tab.tabIndex = on ? 0 : -1;
      panelOf(tab).hidden = !on;
    }
    if (focus) chosen.focus();
    onSelect(chosen.dataset.hash || chosen.id, panelOf(chosen));
  }

  function select(chosen, options) {
    // Replaced, not pushed: stepping through the tabs with the arrow keys should not
    // leave a history entry per tab for Back to walk through.
    if (hash && window.location.hash !== `#${chosen.dataset.hash}`) {
      window.history.replaceState(null, "", `#${chosen.dataset.hash}`);
    }
    show(chosen, options);
  }

  for (const [index, tab] of tabs.entries()) {
    tab.addEventListener("click", () => select(tab));
    tab.addEventListener("keydown", (event) => {
      const to = {
        ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: tabs.length - 1,
      }[event.key];
      if (to === undefined) return;
      event.preventDefault();
      select(tabs[(to + tabs.length) % tabs.length], { focus: true });
    });
  }
  if (hash) {
    // A link within the page to another tab (href="#logs") selects it.
    window.addEventListener("hashchange", () => show(byHash(window.location.hash) || tabs[0]));
    // A link to a tab opens it; an unknown or missing hash opens the first.
    show(byHash(window.location.hash) || tabs[0]);
  }
  return { select: (name) => select(byHash(name) || tabs[0]) };
};
