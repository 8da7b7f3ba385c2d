"""Small Sphinx fixes for the rlbook site, so every page loads with no console error offline.

* sphinx-thebe (which Jupyter Book 1 always loads, though the site uses no live code) registers its
  inline configuration script twice under Sphinx 7, and the second ``const THEBE_JS_URL`` throws;
  identical scripts are dropped from each page.
* The theme's colour mode is set (light; the reader can switch), instead of an empty mode that
  the theme reports as a console error.
* The ipywidgets HTML manager (which shows each widget in the state the notebook saved) and
  RequireJS, which it needs, come from ``_assets/vendor/``, RequireJS first.
* The HTML manager typesets widget labels with the MathJax 2 API (``MathJax.Hub.Queue``);
  the site uses MathJax 3, so ``_assets/rlbook-mathjax2-shim.js`` maps that call to
  ``MathJax.typesetPromise``.
* ``_assets/rlbook-reader.css`` wraps long code lines and keeps figures' aspect ratio;
  ``_assets/rlbook-zoom.js`` enlarges a figure on click (offline, no library).
"""

from __future__ import annotations


def _page_context(app, pagename, templatename, context, doctree):
    # the theme writes "" as the colour mode when none is set, then logs an error and resets it
    if not context.get("default_mode"):
        context["default_mode"] = "light"
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        key = (js.filename or "", js.priority, tuple(sorted((k, str(v)) for k, v in getattr(js, "attributes", {}).items())))
        if key in seen:
            continue
        seen.add(key)
        kept.append(js)
    scripts[:] = kept


def setup(app):
    app.connect("html-page-context", _page_context, priority=999)
    app.add_js_file("rlbook-mathjax2-shim.js", priority=100)
    app.add_css_file("rlbook-reader.css")
    app.add_js_file("rlbook-zoom.js", priority=500)
    # after every other script: RequireJS makes UMD scripts loaded after it (clipboard.js) register
    # as anonymous AMD modules, which it then rejects
    app.add_js_file("vendor/require.js", priority=990)
    app.add_js_file("vendor/embed-amd.js", priority=991)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
