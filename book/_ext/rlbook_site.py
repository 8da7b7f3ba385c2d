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
  ``_assets/rlbook-zoom.js`` enlarges a figure on click (offline, no library);
  ``_assets/rlbook-reader.js`` shows long text outputs collapsed, with a "show all" button.
* The theme's repository button (top right of every page) links to ``repository.url`` of
  ``_config.yml``, the one place the address is written (``sphinx.config.html_theme_options``
  there replaces the options Jupyter Book would derive from it, so they are added here).
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


def _repository_button(app, config):
    from pathlib import Path

    import yaml

    book = yaml.safe_load((Path(app.srcdir) / "_config.yml").read_text()) or {}
    repo = book.get("repository") or {}
    if repo.get("url"):
        config.html_theme_options = {**config.html_theme_options, "repository_url": repo["url"],
                                     "repository_branch": repo.get("branch", "main"),
                                     "path_to_docs": repo.get("path_to_book", ""),
                                     "use_repository_button": True}


def setup(app):
    app.connect("config-inited", _repository_button)
    app.connect("html-page-context", _page_context, priority=999)
    app.add_js_file("rlbook-mathjax2-shim.js", priority=100)
    app.add_css_file("rlbook-reader.css")
    app.add_js_file("rlbook-zoom.js", priority=500)
    app.add_js_file("rlbook-reader.js", priority=500)
    # after every other script: RequireJS makes UMD scripts loaded after it (clipboard.js) register
    # as anonymous AMD modules, which it then rejects
    app.add_js_file("vendor/require.js", priority=990)
    app.add_js_file("vendor/embed-amd.js", priority=991)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
