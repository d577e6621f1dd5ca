// The conversation page's keys: j/k the next/previous turn, n/p (or J/K) round, ]/[ (or the
// right/left arrows) call, Enter or o opens the call panel of the call moved to, Esc closes it
// (toolscope.js) or this help, ? shows the help (the <dialog id="keys-help"> of the page). The
// place moved to is marked like a followed link (the "focused" class), gets the keyboard focus
// and names itself in the address bar. No key is taken while typing in a field or with Ctrl,
// Alt or Cmd held.
"use strict";

(function () {
  const KINDS = {
    turn: "#timeline .msg.turn-start",
    round: "#timeline .round[id]",
    call: "#timeline .call-card",
  };
  const KEYS = {
    j: ["turn", true], k: ["turn", false],
    n: ["round", true], p: ["round", false], J: ["round", true], K: ["round", false],
    "]": ["call", true], "[": ["call", false], ArrowRight: ["call", true], ArrowLeft: ["call", false],
  };
  const TOP = 72; // the sticky top bar's height, in CSS pixels

  function items(kind) {
    const list = Array.from(document.querySelectorAll(KINDS[kind]));
    // The errors-only view shows runs without their user message: each run is a turn there.
    return kind === "turn" && !list.length ? Array.from(document.querySelectorAll("#timeline .msg")) : list;
  }

  function current() {
    return document.querySelector("#timeline .focused");
  }

  function mark(target) {
    document.querySelectorAll(".focused").forEach(function (e) { e.classList.remove("focused"); });
    target.classList.add("focused");
  }

  function move(target) {
    mark(target);
    const message = target.closest(".msg");
    if (message) message.classList.add("expanded"); // "collapse all" unfolds the one moved to
    if (!target.matches("a, button")) target.setAttribute("tabindex", "-1");
    target.focus({ preventScroll: true });
    target.scrollIntoView({ block: target.matches(".call-card") ? "center" : "start" });
    const label = target.querySelector(".turn-label[id]");
    const id = label ? label.id : target.id;
    if (id) history.replaceState(null, "", "#" + id);
  }

  function step(kind, forward) {
    const list = items(kind);
    if (!list.length) return;
    const from = current();
    let target;
    if (!from) {
      // Nothing moved to yet: from what is at the top of the window.
      const below = list.filter(function (e) { return e.getBoundingClientRect().top >= TOP - 1; });
      target = forward ? below[0] || list[list.length - 1] : list[list.indexOf(below[0]) - 1] || list[0];
    } else if (forward) {
      target = list.find(function (e) {
        return !e.contains(from) && from.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING;
      });
    } else {
      target = list.slice().reverse().find(function (e) {
        return !e.contains(from) && from.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_PRECEDING;
      });
    }
    if (target) move(target);
  }

  function help() {
    return document.getElementById("keys-help");
  }

  function toggleHelp() {
    const dialog = help();
    if (!dialog) return;
    if (dialog.open) dialog.close(); else dialog.showModal();
  }

  // Capture, ahead of toolscope.js: Esc with the help open closes the help, not the call panel.
  window.addEventListener("keydown", function (event) {
    const dialog = help();
    if (event.key === "Escape" && dialog && dialog.open) {
      event.stopPropagation();
      event.preventDefault();
      dialog.close();
    }
  }, true);

  document.addEventListener("keydown", function (event) {
    if (!document.getElementById("timeline") || event.defaultPrevented) return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target.closest && target.closest("input, textarea, select, [contenteditable]")) return;
    const dialog = help();
    if (event.key === "?") {
      event.preventDefault();
      toggleHelp();
      return;
    }
    if (dialog && dialog.open) return;
    const here = current();
    if (event.key === "Escape") {
      // toolscope.js closed the call panel; the keys go on from the call.
      if (here && here.matches(".call-card")) here.focus({ preventScroll: true });
      return;
    }
    if (event.key === "Enter" || event.key === "o") {
      const active = document.activeElement;
      const mine = !active || active === document.body || active === here;
      if (here && here.matches(".call-card") && (mine || event.key === "o")) {
        event.preventDefault();
        here.click();
      }
      return;
    }
    const action = KEYS[event.key];
    if (!action) return;
    event.preventDefault();
    step(action[0], action[1]);
  });

  document.addEventListener("click", function (event) {
    if (!event.target.closest) return;
    if (event.target.closest("[data-keys-help]")) {
      toggleHelp();
      return;
    }
    if (event.target.closest("[data-keys-close]")) {
      if (help()) help().close();
      return;
    }
    // A call clicked is where the keys go on from.
    const card = event.target.closest("#timeline .call-card");
    if (card) mark(card);
  });

  function start() {
    document.querySelectorAll("[data-keys-help][hidden]").forEach(function (b) { b.hidden = false; });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
