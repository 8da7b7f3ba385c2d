"""The wiring every explorer shares: controls → a pure drawing function → figure, numbers, messages.

An explorer is three things: its controls (ipywidgets), a *render* function that turns the controls'
values into a Matplotlib figure, a short text of the numbers it computed (the readout) and any
warnings, and the layout of the controls. :func:`live_explorer` connects them:

* every change of a control calls ``render(**values)``;
* the figure is drawn to PNG bytes here and shown as an image in an ``Output`` widget with the CSS
  class ``rlbook-figure`` (so it shows with any Matplotlib backend, in a live kernel, in Voilà and
  in the saved widget state of a static page);
* the readout goes into an ``HTML`` widget with the class ``rlbook-readout``;
* warnings, and any exception ``render`` raises, go into an ``HTML`` widget with the class
  ``rlbook-error`` as one readable line starting with "⚠": the last good figure and numbers stay,
  and no traceback reaches the reader;
* while ``render`` runs, an ``HTML`` widget above the figure (class ``rlbook-status``) says
  "updating…", so a figure that still shows the previous setting is never taken for the new one
  (the message leaves the kernel as soon as it is set, before the drawing starts).

The drawing functions themselves live beside each explorer and are pure and tested; this module
only moves values around.
"""

from __future__ import annotations

import html
import io
import struct
from typing import Callable, NamedTuple, Sequence

__all__ = ["Frame", "live_explorer", "figure_png", "png_size", "shown_image", "SCREEN_DPI", "FIGURE_DPI"]


class Frame(NamedTuple):
    """What a render function returns: the figure, the numbers as text, and warnings (each one line)."""

    figure: object
    readout: str
    warnings: Sequence[str] = ()


# the figures are drawn at twice the resolution they are shown at (``SCREEN_DPI``), so that text stays
# sharp on high-density screens and when zoomed
SCREEN_DPI = 80
FIGURE_DPI = 2 * SCREEN_DPI


def figure_png(figure, dpi: int = FIGURE_DPI) -> bytes:
    """The Matplotlib ``figure`` as PNG bytes (closed afterwards, so figures do not pile up)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    finally:
        plt.close(figure)
    return buffer.getvalue()


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels of the PNG ``png``, read from its header.

    Raises:
        ValueError: ``png`` is not a PNG image.
    """
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise ValueError("`png` must be the bytes of a PNG image")
    return struct.unpack(">II", png[16:24])


def shown_image(png: bytes, dpi: int = FIGURE_DPI):
    """The PNG ``png``, drawn at ``dpi``, as an IPython image shown at ``SCREEN_DPI`` (its width set).

    Raises:
        ValueError: ``png`` is not a PNG image.
    """
    from IPython.display import Image

    return Image(data=png, format="png", width=round(png_size(png)[0] * SCREEN_DPI / dpi))


def _message(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


# the readout's tables line up in columns only in a fixed-width font: name one explicitly, since the
# page around it (Voilà's, the book's) may give <pre> its proportional text font
MONOSPACE = ("ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', 'Liberation Mono', "
             "'Courier New', monospace")
READOUT_STYLE = f"margin:0;font-size:12px;line-height:1.3;font-family:{MONOSPACE};white-space:pre"
# what the status line says while the figure is being redrawn
UPDATING = '<span style="color:#555;font-style:italic">updating…</span>'


def live_explorer(controls: dict, layout: Sequence[Sequence[str]], render: Callable[..., Frame], *,
                  dpi: int = FIGURE_DPI):
    """Wire ``controls`` to ``render`` and lay them out above the figure, the readout and the messages.

    Args:
        controls: name → ipywidgets value widget (slider, dropdown, toggle, ...); ``render`` is
            called with these names as keyword arguments and the widgets' current values.
        layout: rows of control names, top to bottom (each name exactly once).
        render: ``render(**values) -> Frame``; may raise (``ValueError`` for a value it cannot
            use): the message is shown as "⚠ ...", the previous figure and readout stay.
        dpi: resolution of the figure's PNG; it is shown at ``SCREEN_DPI`` (80) dots per inch, so the
            default 160 is a 2x image, sharp on high-density screens and when zoomed.
    Returns:
        an ``ipywidgets.VBox`` with the extra attributes ``controls`` (the dict), ``figure``,
        ``readout``, ``error`` and ``status`` (the output widgets) and ``redraw()``.
    Raises:
        ValueError: ``layout`` does not name every control exactly once.
    """
    import ipywidgets as widgets
    from IPython.display import display

    named = [name for row in layout for name in row]
    if sorted(named) != sorted(controls):
        raise ValueError(f"`layout` must name every control exactly once; controls {sorted(controls)}, "
                         f"layout {named}")
    figure = widgets.Output()
    figure.add_class("rlbook-figure")
    readout = widgets.HTML()
    readout.add_class("rlbook-readout")
    error = widgets.HTML()
    error.add_class("rlbook-error")
    status = widgets.HTML()
    status.add_class("rlbook-status")

    def redraw(*_):
        values = {name: w.value for name, w in controls.items()}
        status.value = UPDATING
        try:
            try:
                frame = render(**values)
                png = figure_png(frame.figure, dpi)
            except Exception as err:  # noqa: BLE001  (any failure becomes a readable line, never a traceback)
                error.value = f'<span style="color:#b00">⚠ {html.escape(_message(err))}</span>'
                return
            figure.clear_output(wait=True)
            with figure:
                display(shown_image(png, dpi))
            readout.value = f'<pre style="{READOUT_STYLE}">{html.escape(frame.readout)}</pre>'
            error.value = "".join(f'<div style="color:#b00">⚠ {html.escape(w)}</div>' for w in frame.warnings)
        finally:
            status.value = ""

    for w in controls.values():
        w.observe(redraw, names="value")
    rows = [widgets.HBox([controls[name] for name in row]) for row in layout]
    box = widgets.VBox([*rows, status, figure, readout, error])
    box.add_class("rlbook-live")
    box.controls, box.figure, box.readout, box.error, box.redraw = controls, figure, readout, error, redraw
    box.status = status
    redraw()
    return box
