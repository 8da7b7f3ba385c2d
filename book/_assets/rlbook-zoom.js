// Click a figure of a chapter's output to see it at full resolution over the page; click again or
// press Escape to close. The chapters store figures at twice their displayed pixel density, so the
// enlarged figure stays sharp. No library and nothing from the network.
(function () {
  function close() {
    var open = document.querySelector(".rlbook-zoom-overlay");
    if (open) open.remove();
  }
  function zoom(img) {
    close();
    var overlay = document.createElement("div");
    overlay.className = "rlbook-zoom-overlay";
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-label", "enlarged figure (click or press Escape to close)");
    var big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt || "";
    // as large as the stored pixels allow, within the window
    big.style.width = Math.min(img.naturalWidth || 0, window.innerWidth * 0.96) + "px";
    big.style.height = "auto";
    overlay.appendChild(big);
    overlay.addEventListener("click", close);
    document.body.appendChild(overlay);
  }
  document.addEventListener("click", function (event) {
    var img = event.target;
    if (img && img.tagName === "IMG" && img.closest("div.cell_output") && !img.closest(".rlbook-zoom-overlay")) {
      event.preventDefault();
      zoom(img);
    }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") close();
  });
})();
