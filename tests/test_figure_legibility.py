"""Every figure of the book is readable at 100 % zoom: its text is at least about 9 CSS px tall.

The site's text column is 688 CSS px wide. A figure wider than that is scaled down to fit, and its
text shrinks with it (the 10-15 in figures of the first drafts came out with 5-6 px labels). The
chapters draw with Matplotlib at ``dpi=80``, so

* a figure ``w`` inches wide is ``80·w`` CSS px wide: it is never scaled down when ``w ≤ 8.6``
  (8.6 × 80 = 688; the house width is 8.4 in = 672 px);
* one point of font is 80/72 ≈ 1.11 CSS px: a font of 8.5 pt is 9.4 px, so no explicit size may be
  below 8.5 pt (Matplotlib's default, 10 pt = 11 px, is fine).

A figure made without ``dpi=`` is drawn at Matplotlib's default, ``figure.dpi`` = 100: this repository
sets no ``matplotlibrc``/``rcParams``, and matplotlib-inline (>= 0.1.4) no longer overrides it. The
chapters' ``%config InlineBackend.figure_formats = ["retina"]`` doubles the PNG's pixels but stores
the CSS width (half of them) in the output's metadata, so the rule above is unchanged. The stored
outputs are checked against the column directly; the chapter sources are checked for the literal
sizes that produce them:

* ``test_stored_figures_fit_the_column``: every ``image/png`` output of ``notebooks/NN_*.ipynb`` is at
  most 688 CSS px wide (its ``metadata["image/png"]["width"]``, else the PNG's own width).
* ``test_source_*``: in the code of ``notebooks/src/NN_*.py`` (jupytext percent format; markdown
  cells are ``#`` comments, which the parser skips), every literal ``figsize=(w, h)`` has
  ``w·dpi ≤ 688`` (``w ≤ 8.6`` at 80 dpi); every ``plt.subplots``/``plt.figure`` call has a literal
  ``figsize`` and, when it names a ``dpi``, ``dpi=80``; every literal font size (``fontsize=``,
  ``labelsize=``, ``title_fontsize=``, ``size=`` of a text call, ``"size"``/``"fontsize"`` of a
  ``prop``/``fontdict`` dict, a named size such as ``"small"``, an ``rcParams`` font size) is ≥ 8.5 pt.

Fix a failure in the chapter source (a smaller ``figsize``, panels in two rows, a larger font) and
rebuild the chapter; never by editing the stored output.
"""

from __future__ import annotations

import ast
import base64
import json
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))

COLUMN_PX = 688  # CSS px: the site's text column
DPI = 80  # the chapters' figure dpi
DEFAULT_DPI = 100  # Matplotlib's figure.dpi; nothing in the repository changes it
MAX_WIDTH_IN = COLUMN_PX / DPI  # 8.6 in
MIN_FONT_PT = 8.5  # 8.5 pt × 80/72 = 9.4 CSS px
DEFAULT_FONT_PT = 10.0  # font.size, the base of the named sizes
FONT_SCALINGS = {"xx-small": 0.579, "x-small": 0.694, "small": 0.833, "medium": 1.0, "large": 1.2,
                 "x-large": 1.44, "xx-large": 1.728, "larger": 1.2, "smaller": 0.833}  # matplotlib.font_manager

FONT_KEYWORDS = {"fontsize", "labelsize", "title_fontsize"}
# calls whose ``size=`` is a font size (elsewhere ``size=`` is an array shape, a model size, ...)
TEXT_CALLS = {"text", "annotate", "figtext", "suptitle", "supxlabel", "supylabel", "title", "xlabel", "ylabel",
              "set_title", "set_xlabel", "set_ylabel", "set_xticklabels", "set_yticklabels", "set_xticks",
              "set_yticks", "xticks", "yticks", "legend", "set_label_text", "clabel", "bar_label"}
DICT_KEYWORDS = {"prop", "fontdict", "textprops"}
FIGURE_CALLS = {"subplots", "figure", "subplot_mosaic"}


# --------------------------------------------------------------------------------------------------
# stored outputs


def _png_width(data: str) -> int:
    """Pixel width of a base64 PNG: the IHDR chunk's first field (bytes 16-20 of the file)."""
    png = base64.b64decode(data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">I", png[16:20])[0]


def _shown_widths(notebook: Path):
    """(cell index, CSS width) of every image/png output of ``notebook``."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    for index, cell in enumerate(cells):
        for output in cell.get("outputs", []):
            data = output.get("data", {}).get("image/png")
            if data is None:
                continue
            if isinstance(data, list):
                data = "".join(data)
            width = output.get("metadata", {}).get("image/png", {}).get("width")
            yield index, float(width) if width is not None else _png_width(data)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_figures_fit_the_column(notebook):
    too_wide = [f"{notebook.name} cell {index}: figure shown {width:g} px wide" for index, width in _shown_widths(notebook)
                if width > COLUMN_PX]
    assert not too_wide, (f"{len(too_wide)} figure(s) wider than the {COLUMN_PX} px column, shrunk to fit "
                          f"(make them ≤ {MAX_WIDTH_IN:g} in at dpi={DPI} and rebuild):\n" + "\n".join(too_wide))


def test_png_width_reads_the_header():
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + struct.pack(">II", 1327, 495) + b"\x08\x06\x00\x00\x00"
    assert _png_width(base64.b64encode(header).decode()) == 1327


# --------------------------------------------------------------------------------------------------
# chapter sources


def _number(node):
    """The value of a numeric literal (``8``, ``8.5``, ``-1``), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _number(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


def _font_points(node):
    """A literal font size in points (a number or a named size such as "small"), else None."""
    value = _number(node)
    if value is not None:
        return float(value)
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FONT_SCALINGS:
        return DEFAULT_FONT_PT * FONT_SCALINGS[node.value]
    return None


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_pyplot_figure_call(call: ast.Call) -> bool:
    """``plt.subplots(...)``, ``plt.figure(...)``, ``pyplot.subplot_mosaic(...)`` and the like."""
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr in FIGURE_CALLS and isinstance(func.value, ast.Name)
            and func.value.id in {"plt", "pyplot"})


def _rc_font_or_dpi(target: ast.expr):
    """The key of an ``rcParams[...]`` subscript target, else None."""
    if isinstance(target, ast.Subscript):
        base = target.value
        name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
        key = target.slice
        if name == "rcParams" and isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
    return None


def _source_problems(path: Path, root: Path = ROOT) -> dict[str, list[str]]:
    """{"figsize": [...], "dpi": [...], "font": [...]}: each problem as "file:line: what" (file relative to ``root``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    problems = {"figsize": [], "dpi": [], "font": []}
    where = lambda node: f"{path.relative_to(root)}:{node.lineno}"  # noqa: E731

    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign)):  # plt.rcParams["font.size"] = 7, ...["figure.dpi"] = 100
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                key = _rc_font_or_dpi(target)
                if key is None:
                    continue
                if key.endswith("dpi") and _number(node.value) not in (None, DPI):
                    problems["dpi"].append(f"{where(node)}: rcParams[{key!r}] = {_number(node.value):g} (want {DPI})")
                points = _font_points(node.value)
                if ("size" in key and "fig" not in key and "marker" not in key and points is not None
                        and points < MIN_FONT_PT):
                    problems["font"].append(f"{where(node)}: rcParams[{key!r}] = {points:g} pt (< {MIN_FONT_PT:g})")
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg is not None}

        # figure width: w × dpi ≤ 688 px
        dpi = _number(keywords["dpi"]) if "dpi" in keywords else None
        figure_call = _is_pyplot_figure_call(node)
        if figure_call and "dpi" in keywords and dpi != DPI:
            shown = f"{dpi:g}" if dpi is not None else ast.unparse(keywords["dpi"])
            problems["dpi"].append(f"{where(node)}: {name}(dpi={shown}) (want dpi={DPI}: the book's px per inch)")
        if "figsize" in keywords:
            figsize = keywords["figsize"]
            width = _number(figsize.elts[0]) if isinstance(figsize, (ast.Tuple, ast.List)) and figsize.elts else None
            if width is None:
                if figure_call:
                    problems["figsize"].append(f"{where(node)}: {name}(figsize={ast.unparse(figsize)}) is not a literal "
                                               f"(w, h): write the size out so that it can be checked")
            else:
                px_per_inch = dpi if dpi is not None else (DEFAULT_DPI if figure_call and "dpi" not in keywords else DPI)
                if width * px_per_inch > COLUMN_PX:
                    problems["figsize"].append(
                        f"{where(node)}: figsize width {width:g} in at {px_per_inch:g} dpi = {width * px_per_inch:g} px "
                        f"(> {COLUMN_PX}; at most {COLUMN_PX / px_per_inch:g} in)")

        if figure_call and "figsize" not in keywords:
            problems["figsize"].append(f"{where(node)}: {name}(...) without figsize (Matplotlib's default is 6.4 in at "
                                       f"{DEFAULT_DPI} dpi; give figsize and dpi={DPI})")

        # font sizes
        for key, value in keywords.items():
            if key in FONT_KEYWORDS or (key == "size" and name in TEXT_CALLS):
                points = _font_points(value)
                if points is not None and points < MIN_FONT_PT:
                    problems["font"].append(f"{where(value)}: {name}({key}={ast.unparse(value)}) is {points:g} pt "
                                            f"(< {MIN_FONT_PT:g})")
            if key in DICT_KEYWORDS and isinstance(value, ast.Dict):
                for k, v in zip(value.keys, value.values):
                    if isinstance(k, ast.Constant) and k.value in ("size", "fontsize"):
                        points = _font_points(v)
                        if points is not None and points < MIN_FONT_PT:
                            problems["font"].append(f"{where(v)}: {name}({key}={{{k.value!r}: {ast.unparse(v)}}}) "
                                                    f"is {points:g} pt (< {MIN_FONT_PT:g})")
        if name == "rc" and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "font":
            points = _font_points(keywords["size"]) if "size" in keywords else None
            if points is not None and points < MIN_FONT_PT:
                problems["font"].append(f"{where(node)}: rc('font', size={points:g}) (< {MIN_FONT_PT:g})")
    return problems


def _all(kind: str) -> list[str]:
    return [p for path in SOURCES for p in _source_problems(path)[kind]]


def test_source_chapters_found():
    assert len(SOURCES) >= 17, f"expected the chapter sources under notebooks/src, found {len(SOURCES)}"


def test_source_figures_fit_the_column():
    problems = _all("figsize")
    assert not problems, (f"figures wider than the {COLUMN_PX} px column ({MAX_WIDTH_IN:g} in at dpi={DPI}; "
                          f"use 8.4 in, panels in two rows):\n" + "\n".join(problems))


def test_source_figures_use_the_book_dpi():
    problems = _all("dpi")
    assert not problems, f"figures not drawn at dpi={DPI}:\n" + "\n".join(problems)


def test_source_font_sizes_are_legible():
    problems = _all("font")
    assert not problems, (f"font sizes below {MIN_FONT_PT:g} pt ({MIN_FONT_PT * DPI / 72:.1f} CSS px at dpi={DPI}):\n"
                          + "\n".join(problems))


@pytest.mark.parametrize("code, kind, expected", [
    ("fig, ax = plt.subplots(figsize=(10, 3), dpi=80)", "figsize", "figsize width 10 in at 80 dpi = 800 px"),
    ("fig, ax = plt.subplots(figsize=(8.4, 3), dpi=80)", "figsize", None),
    ("fig, ax = plt.subplots(figsize=(8.4, 3))", "figsize", "at 100 dpi = 840 px"),
    ("fig, ax = plt.subplots(figsize=FIGSIZE, dpi=80)", "figsize", "is not a literal"),
    ("fig, ax = plt.subplots(2, 2)", "figsize", "without figsize"),
    ("fig, ax = plt.subplots(figsize=(6, 3), dpi=100)", "dpi", "dpi=100"),
    ("ax.legend(fontsize=7)", "font", "legend(fontsize=7) is 7 pt"),
    ("ax.legend(fontsize=8.5)", "font", None),
    ("ax.legend(fontsize='small')", "font", "8.33 pt"),
    ("ax.tick_params(axis='y', labelsize=7)", "font", "labelsize=7"),
    ("ax.legend(title_fontsize=8)", "font", "title_fontsize=8"),
    ("ax.text(0, 0, 'a', size=6)", "font", "text(size=6)"),
    ("x = rng.normal(size=6)", "font", None),
    ("ax.legend(prop={'size': 7})", "font", "prop={'size': 7}"),
    ("plt.rcParams['legend.fontsize'] = 7", "font", "rcParams['legend.fontsize'] = 7"),
    ("# ax.legend(fontsize=5)  (markdown or a comment)", "font", None),
])
def test_source_checker_catches(tmp_path, code, kind, expected):
    """The checker itself: each kind of problem is reported with its file and line, and only those."""
    path = tmp_path / "99_example.py"
    path.write_text("# %%\nimport matplotlib.pyplot as plt\n" + code + "\n", encoding="utf-8")
    found = _source_problems(path, root=tmp_path)[kind]
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0] and found[0].startswith("99_example.py:3:"), found


# --------------------------------------------------------------------------------------------------
# the explorers and the plotting helpers: their figures are saved into the chapters (the widgets' state
# shows them on the site) and drawn on the Voilà pages


WIDGET_SOURCES = sorted((ROOT / "rlbook" / "widgets").glob("*_explorer.py")) + [ROOT / "rlbook" / "plotting.py"]


def _widget_problems(kind: str) -> list[str]:
    found = [p for path in WIDGET_SOURCES for p in _source_problems(path)[kind]]
    # a size given by the module's FIGSIZE constant is checked below, from the module itself; get_ax's size is
    # its caller's, checked at the call (``get_ax(ax, figsize=(6.0, 3.6))``)
    return [p for p in found if "figsize=FIGSIZE) is not a literal" not in p
            and not (p.startswith("rlbook/plotting.py") and "figsize=figsize) is not a literal" in p)]


def test_widget_sources_found():
    assert len(WIDGET_SOURCES) >= 11, [p.name for p in WIDGET_SOURCES]


@pytest.mark.parametrize("kind", ["figsize", "dpi", "font"])
def test_widget_figures_fit_the_column_at_the_book_dpi_with_legible_fonts(kind):
    problems = _widget_problems(kind)
    assert not problems, f"explorer or plotting figures with a {kind} problem:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", [p for p in WIDGET_SOURCES if "FIGSIZE = (" in p.read_text(encoding="utf-8")],
                         ids=lambda p: p.stem)
def test_widget_figsize_constants_fit_the_column(path):
    import importlib

    module = importlib.import_module(f"rlbook.widgets.{path.stem}")
    width = module.FIGSIZE[0]
    assert width * DPI <= COLUMN_PX, f"{path.name}: FIGSIZE {module.FIGSIZE} is {width * DPI:g} px at dpi={DPI}"
