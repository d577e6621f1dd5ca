// Foldable JSON (the call panel's arguments and response, the replay's raw JSON): the server
// renders each value of a <pre class="jtree"> in a <span class="jn"> and the inside of each
// non-empty object or array in a <span class="jk"> (webapp/views/highlight.py, fold_tree); the
// <pre>'s text stays the pretty-printed JSON. This adds to every value a button that folds it
// (objects and arrays) and two that copy its JSON or its path ($.results[3].title). Without
// script the JSON is shown whole, as before.
"use strict";

(function () {
  const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

  function button(kind, label) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "jb jb-" + kind;
    b.dataset.jtree = kind;
    b.setAttribute("aria-label", label);
    b.title = label;
    return b; // no text: the labels are CSS, so the <pre>'s text stays the JSON
  }

  function enhance(root) {
    const trees = root.matches && root.matches("pre.jtree") ? [root] : root.querySelectorAll("pre.jtree");
    trees.forEach(function (tree) {
      if (tree.dataset.jtreeReady) return;
      tree.dataset.jtreeReady = "1";
      tree.querySelectorAll(".jn").forEach(function (node) {
        const open = node.firstElementChild;
        const container = open && open.classList.contains("jo");
        const tools = document.createElement("span");
        tools.className = "jtools";
        tools.append(button("value", "Copy this value's JSON"), button("path", "Copy this value's path"));
        if (container) {
          const toggle = button("fold", "Fold");
          toggle.setAttribute("aria-expanded", "true");
          node.insertBefore(toggle, open);
          open.after(tools);
        } else {
          node.prepend(tools);
        }
      });
    });
  }

  // The key of a value in an object (the key span before its ": "), or its index in an array.
  function step(node) {
    const inside = node.parentElement;
    if (!inside || !inside.classList.contains("jk")) return null;
    const parent = inside.parentElement;
    const open = parent.querySelector(":scope > .jo");
    if (open.textContent === "[") {
      return "[" + Array.prototype.indexOf.call(inside.querySelectorAll(":scope > .jn"), node) + "]";
    }
    const colon = node.previousElementSibling;
    const keySpan = colon && colon.previousElementSibling;
    const key = JSON.parse(keySpan.textContent);
    return IDENTIFIER.test(key) ? "." + key : "[" + JSON.stringify(key) + "]";
  }

  function pathOf(node) {
    const steps = [];
    for (let n = node; n; n = n.parentElement.closest(".jn")) {
      const s = step(n);
      if (s === null) break;
      steps.unshift(s);
    }
    return "$" + steps.join("");
  }

  // The value's JSON as the server pretty-printed it, its lines moved back to the left margin.
  function valueOf(node) {
    let depth = 0;
    for (let n = node.parentElement; n && !n.matches("pre.jtree"); n = n.parentElement) {
      if (n.classList.contains("jk")) depth += 1;
    }
    return node.textContent.split("\n" + "  ".repeat(depth)).join("\n");
  }

  function fallbackCopy(text) {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    let done = false;
    try { done = document.execCommand("copy"); } catch (error) { done = false; }
    area.remove();
    return done;
  }

  function copied(b, ok) {
    b.dataset.state = ok ? "copied" : "failed";
    setTimeout(function () { delete b.dataset.state; }, 1500);
  }

  function copy(text, b) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () { copied(b, true); },
        function () { copied(b, fallbackCopy(text)); }
      );
    } else {
      copied(b, fallbackCopy(text));
    }
  }

  // The value whose copy buttons show: the one under the pointer (its key counts), kept while
  // the pointer crosses a comma or the empty end of the line towards the buttons.
  function hover(event) {
    const target = event.target;
    if (!target.closest) return;
    const tree = target.closest("pre.jtree");
    if (!tree) {
      document.querySelectorAll("pre.jtree .jn.hot").forEach(function (n) { n.classList.remove("hot"); });
      return;
    }
    let node = null;
    if (target.classList.contains("j-key") && target.parentElement.classList.contains("jk")) {
      node = target.nextElementSibling && target.nextElementSibling.nextElementSibling;
    } else if (!target.classList.contains("jk") && !target.parentElement.classList.contains("jk")) {
      node = target.closest(".jn");
    }
    if (!node || node.classList.contains("hot")) return;
    document.querySelectorAll("pre.jtree .jn.hot").forEach(function (n) { n.classList.remove("hot"); });
    node.classList.add("hot");
  }
  document.addEventListener("mouseover", hover);
  document.addEventListener("focusin", hover);

  document.addEventListener("click", function (event) {
    const b = event.target.closest && event.target.closest("pre.jtree [data-jtree]");
    if (!b) return;
    event.preventDefault();
    const node = b.closest(".jn");
    if (b.dataset.jtree === "fold") {
      const folded = node.classList.toggle("folded");
      b.setAttribute("aria-expanded", folded ? "false" : "true");
      b.setAttribute("aria-label", folded ? "Unfold" : "Fold");
      b.title = folded ? "Unfold" : "Fold";
    } else {
      copy(b.dataset.jtree === "path" ? pathOf(node) : valueOf(node), b);
    }
  });

  function start() {
    enhance(document);
    document.addEventListener("htmx:load", function (event) { enhance(event.target); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
