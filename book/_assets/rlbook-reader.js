// Long text outputs: a code cell whose text output runs past the site's limit carries the class
// tag_rlbook-long-output (the site build tags it; the notebooks are untouched). Its output shows
// collapsed to its first lines with a button "Show all N lines" (and "Show less" once open).
// Without JavaScript, and in print, the whole output shows. No library and nothing from the network.
(function () {
  var SHOWN_LINES = 15;
  function setUp(cell) {
    var output = cell.querySelector("div.cell_output");
    if (!output || output.dataset.rlbookCollapsible) return;
    var text = output.innerText || output.textContent || "";
    var lines = text.replace(/\n+$/, "").split("\n").length;
    var pre = output.querySelector("pre");
    var lineHeight = pre ? parseFloat(getComputedStyle(pre).lineHeight) || 20 : 20;
    output.dataset.rlbookCollapsible = "1";
    output.style.setProperty("--rlbook-collapsed-height", Math.round(SHOWN_LINES * lineHeight + 16) + "px");
    output.classList.add("rlbook-collapsed");
    var button = document.createElement("button");
    button.type = "button";
    button.className = "rlbook-output-toggle";
    button.setAttribute("aria-expanded", "false");
    button.textContent = "Show all " + lines + " lines";
    button.addEventListener("click", function () {
      var collapsed = output.classList.toggle("rlbook-collapsed");
      button.setAttribute("aria-expanded", collapsed ? "false" : "true");
      button.textContent = collapsed ? "Show all " + lines + " lines" : "Show less";
      if (collapsed) cell.scrollIntoView({block: "nearest"});
    });
    output.insertAdjacentElement("afterend", button);
  }
  function init() {
    document.querySelectorAll("div.cell.tag_rlbook-long-output").forEach(setUp);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

// Inline formulas wider than their paragraph (a long sum on a phone-width window) scroll sideways
// inside the text instead of pushing the whole page wider than the window; re-checked on resize.
(function () {
  function fit() {
    document.querySelectorAll("mjx-container:not([display='true'])").forEach(function (m) {
      m.classList.remove("rlbook-wide-math");
      var block = m.closest("p, li, td, th, div") || m.parentElement;
      var room = block.getBoundingClientRect().right - m.getBoundingClientRect().left;
      if (m.getBoundingClientRect().width > room + 1) m.classList.add("rlbook-wide-math");
    });
  }
  function init() {
    var ready = window.MathJax && MathJax.startup && MathJax.startup.promise;
    (ready ? MathJax.startup.promise : Promise.resolve()).then(fit);
    var timer;
    window.addEventListener("resize", function () { clearTimeout(timer); timer = setTimeout(fit, 150); });
  }
  if (document.readyState === "complete") init();
  else window.addEventListener("load", init);
})();

// Code names in the prose and the tables (`clip_eps_high`, `rl.lm.sequence_log_probs`,
// `CategoricalMLPPolicy`) may wrap after an underscore, a dot, an equals sign or a comma, and between
// the words of a CamelCase name, never in the middle of a word: a <wbr> is placed at each such point
// (the text, and what a copy gives, are unchanged).
(function () {
  var POINT = /[_.=,](?=.)|[a-z](?=[A-Z])|[A-Z](?=[A-Z][a-z])/g;
  function soften(code) {
    var walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT), nodes = [];
    while (walker.nextNode()) nodes.push(walker.currentNode);
    nodes.forEach(function (node) {
      var text = node.nodeValue, cuts = [], m;
      POINT.lastIndex = 0;
      while ((m = POINT.exec(text))) cuts.push(m.index + 1);
      if (!cuts.length) return;
      var frag = document.createDocumentFragment(), start = 0;
      cuts.concat([text.length]).forEach(function (end) {
        frag.appendChild(document.createTextNode(text.slice(start, end)));
        if (end < text.length) frag.appendChild(document.createElement("wbr"));
        start = end;
      });
      node.parentNode.replaceChild(frag, node);
    });
  }
  function init() {
    document.querySelectorAll("main p code, main li code, main td code, main th code").forEach(soften);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

// Long code lines wrap (rlbook-reader.css); a wrapped line's continuation is indented past the line's own
// indentation (a hanging indent), so the code's structure still reads. Each line of a code cell becomes a
// block of its own that carries its indentation; the text, its newlines included, is unchanged (what the
// copy button copies is the same).
(function () {
  function lines(pre) {
    var out = [[]], walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      var node = walker.currentNode, cls = node.parentNode === pre ? "" : node.parentNode.className || "";
      node.nodeValue.split(/(\n)/).forEach(function (part) {
        if (!part) return;
        out[out.length - 1].push([part, cls]);
        if (part === "\n") out.push([]);
      });
    }
    if (!out[out.length - 1].length) out.pop();
    return out;
  }
  function indent(pre) {
    if (pre.dataset.rlbookLines) return;
    var rows = lines(pre), frag = document.createDocumentFragment();
    rows.forEach(function (row) {
      var line = document.createElement("span"), text = row.map(function (p) { return p[0]; }).join("");
      line.className = "rlbook-line";
      line.style.setProperty("--rlbook-indent", (text.match(/^ */)[0].length + 4) + "ch");
      row.forEach(function (p) {
        if (p[1]) {
          var span = document.createElement("span");
          span.className = p[1];
          span.textContent = p[0];
          line.appendChild(span);
        } else line.appendChild(document.createTextNode(p[0]));
      });
      frag.appendChild(line);
    });
    pre.textContent = "";
    pre.appendChild(frag);
    pre.dataset.rlbookLines = String(rows.length);
  }
  function init() {
    document.querySelectorAll("div.cell_input div.highlight pre").forEach(indent);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
