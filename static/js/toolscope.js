// Toolscope's own few lines of script: Plotly charts rendered when they scroll into view
// (plotly.js itself loaded on first need), copy buttons, the call panel's close button and
// de-duplication of list rows that the live view re-sends, and the timeline's navigation (deep
// links that load the window holding their target, "collapse all"), the trace view's folding span
// tree. Everything else is htmx.
"use strict";

(function () {
  let plotlyLoading = null;

  function loadPlotly() {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (!plotlyLoading) {
      plotlyLoading = new Promise(function (resolve, reject) {
        const meta = document.querySelector('meta[name="plotly-src"]');
        const script = document.createElement("script");
        script.src = meta.content;
        script.onload = function () { resolve(window.Plotly); };
        script.onerror = reject;
        document.head.appendChild(script);
      });
    }
    return plotlyLoading;
  }

  function textColour(element) {
    return getComputedStyle(element).color;
  }

  function drawChart(element) {
    if (element.dataset.drawn) return;
    element.dataset.drawn = "1";
    const figure = JSON.parse(element.dataset.figure);
    loadPlotly().then(function (Plotly) {
      const colour = textColour(element);
      figure.layout.font = Object.assign({}, figure.layout.font, { color: colour });
      figure.layout.xaxis = Object.assign({ gridcolor: "rgba(128,128,128,0.25)" }, figure.layout.xaxis);
      Plotly.newPlot(element, figure.data, figure.layout, figure.config || {}).then(function () {
        if (sizeObserver) sizeObserver.observe(element);
      });
    });
  }

  // Plotly's "responsive" only follows window resizes; the timeline column also narrows when
  // the call panel opens, so every drawn chart follows the size of its own box.
  const sizeObserver = "ResizeObserver" in window
    ? new ResizeObserver(function (entries) {
      entries.forEach(function (entry) {
        const element = entry.target;
        // A chart swapped out or hidden (closed <details>) has nothing to resize.
        if (!element.isConnected || entry.contentRect.width === 0) {
          if (!element.isConnected) sizeObserver.unobserve(element);
          return;
        }
        if (window.Plotly && element.dataset.drawn && element.classList.contains("js-plotly-plot")) {
          Promise.resolve(window.Plotly.Plots.resize(element)).catch(function () {});
        }
      });
    })
    : null;

  const chartObserver = "IntersectionObserver" in window
    ? new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (entry.isIntersecting) {
          chartObserver.unobserve(entry.target);
          drawChart(entry.target);
        }
      });
    }, { rootMargin: "200px" })
    : null;

  function initCharts(root) {
    root.querySelectorAll(".chart[data-figure]").forEach(function (element) {
      if (chartObserver) chartObserver.observe(element); else drawChart(element);
    });
  }

  // Charts follow a change of the system's colour scheme without a reload.
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", function () {
    if (!window.Plotly) return;
    document.querySelectorAll(".chart[data-drawn]").forEach(function (element) {
      window.Plotly.relayout(element, { "font.color": textColour(element) });
    });
  });

  function dedupeRows(root) {
    document.querySelectorAll("table[data-dedupe-rows] tbody").forEach(function (body) {
      const seen = new Set();
      body.querySelectorAll("tr[data-row-id]").forEach(function (row) {
        if (seen.has(row.dataset.rowId)) row.remove(); else seen.add(row.dataset.rowId);
      });
    });
  }

  function flash(button, text) {
    const original = button.dataset.label || button.textContent;
    button.dataset.label = original;
    button.textContent = text;
    setTimeout(function () { button.textContent = original; }, 1500);
  }

  function copyText(text, button) {
    return navigator.clipboard.writeText(text).then(
      function () { flash(button, "Copied"); },
      function () { flash(button, "Copy failed"); }
    );
  }

  document.addEventListener("click", function (event) {
    const copy = event.target.closest("[data-copy-url], [data-copy-target]");
    if (copy) {
      event.preventDefault();
      if (copy.dataset.copyTarget) {
        copyText(document.querySelector(copy.dataset.copyTarget).textContent.trim(), copy);
      } else {
        fetch(copy.dataset.copyUrl, { credentials: "same-origin" })
          .then(function (response) { return response.text(); })
          .then(function (text) { return copyText(text, copy); })
          .catch(function () { flash(copy, "Copy failed"); });
      }
      return;
    }
    if (event.target.closest("[data-close-detail]")) {
      const panel = document.getElementById("detail");
      if (panel) panel.replaceChildren();
      document.querySelectorAll(".call-card.selected").forEach(function (c) { c.classList.remove("selected"); });
      return;
    }
    const card = event.target.closest(".call-card");
    if (card && document.getElementById("detail")) {
      document.querySelectorAll(".call-card.selected").forEach(function (c) { c.classList.remove("selected"); });
      card.classList.add("selected");
    }
  });

  // --- Timeline navigation -------------------------------------------------------------
  // The element ids of the timeline that an address can name: #turn-12, #msg-<id>,
  // #round-<message id>-<round>, #call-<id>. One not on the page (a turn beyond the first
  // window) is opened by asking the server for the window that holds it (?at=...).
  const ANCHOR = /^(turn-[1-9]\d*|msg-\d+|round-\d+-\d+|call-\d+)$/;

  function focusAnchor(id, smooth) {
    const target = document.getElementById(id);
    if (!target) return false;
    const box = target.classList.contains("turn-label") ? target.closest(".msg") : target;
    document.querySelectorAll(".focused").forEach(function (e) { e.classList.remove("focused"); });
    box.classList.add("focused");
    const message = box.closest(".msg");
    if (message) message.classList.add("expanded");
    box.scrollIntoView({ block: "start", behavior: smooth ? "smooth" : "auto" });
    return true;
  }

  function openAnchor(id, push) {
    if (focusAnchor(id, push)) {
      if (push) history.pushState(null, "", "#" + id);
      return;
    }
    const url = new URL(window.location.href);
    if (url.searchParams.get("at") === id) {
      // The window holds the target's message, but a call beyond the first chunk of a long
      // run is not loaded yet: bring the run's next chunk into view (htmx loads it on
      // "revealed"), and look again when it has settled.
      const timeline = document.getElementById("timeline");
      const message = timeline && timeline.dataset.anchorMessage;
      const loader = message && document.querySelector("#run-" + message + " > .loader");
      if (loader) {
        pendingAnchor = id;
        loader.scrollIntoView({ block: "end" });
      }
      return;
    }
    url.searchParams.set("at", id);
    url.searchParams.delete("cursor");
    url.hash = id;
    window.location.assign(url.toString());
  }

  function followHash() {
    const timeline = document.getElementById("timeline");
    const id = decodeURIComponent(window.location.hash.slice(1));
    if (!timeline || !ANCHOR.test(id)) return;
    openAnchor(id, false);
  }

  window.addEventListener("hashchange", followHash);

  let pendingAnchor = null;
  document.addEventListener("htmx:afterSettle", function () {
    if (!pendingAnchor) return;
    const id = pendingAnchor;
    pendingAnchor = null;
    openAnchor(id, false);
  });

  document.addEventListener("click", function (event) {
    // A turn-index link to a turn already on the page scrolls there without a request.
    const link = event.target.closest("a.turn-link");
    const linked = link ? decodeURIComponent(link.hash.slice(1)) : "";
    if (linked && ANCHOR.test(linked) && document.getElementById(linked)) {
      event.preventDefault();
      openAnchor(linked, true);
      return;
    }
    const toggle = event.target.closest("[data-view-toggle=collapsed]");
    const timeline = document.getElementById("timeline");
    if (toggle && timeline) {
      event.preventDefault();
      const collapsed = timeline.classList.toggle("collapsed");
      toggle.setAttribute("aria-pressed", collapsed ? "true" : "false");
      timeline.querySelectorAll(".msg.expanded").forEach(function (m) { m.classList.remove("expanded"); });
      const url = new URL(window.location.href);
      if (collapsed) url.searchParams.set("view", "collapsed"); else url.searchParams.delete("view");
      history.replaceState(null, "", url.toString());
      return;
    }
    const head = event.target.closest(".timeline.collapsed .msg-head");
    if (head && !event.target.closest("a, button")) {
      head.closest(".msg").classList.toggle("expanded");
      return;
    }
    const card = event.target.closest(".call-card[id]");
    if (card && timeline && timeline.contains(card)) {
      // The address bar names the open call, so it can be copied as a link.
      history.replaceState(null, "", "#" + card.id);
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") {
      const close = document.querySelector("#detail [data-close-detail]");
      if (close) close.click();
    }
  });

  document.addEventListener("htmx:afterSettle", function () { dedupeRows(document); });

  // The time range picker (_lists.html): a preset or "Any time" empties the custom inputs
  // before the form is sent (capture: ahead of htmx's change handler on the form), "Custom
  // range" shows them.
  document.addEventListener("change", function (event) {
    const select = event.target.closest && event.target.closest("select[data-time-range]");
    if (!select) return;
    const custom = select.closest("label").nextElementSibling;
    if (!custom || !custom.classList.contains("time-custom")) return;
    const isCustom = select.selectedOptions[0] && select.selectedOptions[0].hasAttribute("data-custom");
    custom.hidden = !isCustom;
    // Nothing to ask for until a day or time is entered.
    if (isCustom) event.stopPropagation();
    else custom.querySelectorAll("input").forEach(function (input) { input.value = ""; });
  }, true);

  // A saved view keeps the filters the address bar shows when it is saved (the menu was loaded
  // with the page's first ones; the filters may have changed since).
  document.addEventListener("submit", function (event) {
    const form = event.target.closest && event.target.closest("form[data-saved-view-form]");
    if (form) form.elements.query.value = window.location.search.replace(/^\?/, "");
  }, true);

  // The trace view's span tree: a row's button folds the rows under it (those after it that are
  // deeper); unfolding shows them again but for those under a row still folded. Without script
  // the buttons stay hidden and the tree is shown whole.
  function showTraceToggles(root) {
    root.querySelectorAll("[data-trace-toggle][hidden]").forEach(function (b) { b.hidden = false; });
  }

  document.addEventListener("click", function (event) {
    const toggle = event.target.closest("[data-trace-toggle]");
    if (!toggle) return;
    const row = toggle.closest("tr");
    const depth = Number(row.dataset.depth);
    const expand = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", expand ? "true" : "false");
    let foldedBelow = Infinity; // rows deeper than this are under a folded row
    let hidesError = false;
    for (let next = row.nextElementSibling; next; next = next.nextElementSibling) {
      const d = Number(next.dataset.depth);
      if (d <= depth) break;
      if (!expand) {
        next.hidden = true;
        hidesError = hidesError || next.classList.contains("trace-error");
        continue;
      }
      if (d > foldedBelow) continue;
      foldedBelow = Infinity;
      next.hidden = false;
      const inner = next.querySelector("[data-trace-toggle]");
      if (inner && inner.getAttribute("aria-expanded") === "false") foldedBelow = d;
    }
    // A folded row says when an error is among the spans it hides.
    row.classList.toggle("trace-hides-error", hidesError);
  });

  function start() {
    showTraceToggles(document);
    if (window.htmx) window.htmx.onLoad(initCharts); else initCharts(document);
    followHash();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
