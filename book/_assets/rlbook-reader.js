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
