"""The explorers' shared wiring (rlbook/widgets/_live.py): figures drawn at 2x and shown at 1x."""

import pytest

from rlbook.widgets._live import FIGURE_DPI, SCREEN_DPI, Frame, figure_png, live_explorer, png_size, shown_image


def _figure(width_in=4.0, height_in=2.0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width_in, height_in))
    fig.add_subplot().plot([0, 1], [0, 1])
    return fig


def test_png_size_reads_the_header_and_rejects_other_bytes():
    png = figure_png(_figure(), dpi=50)
    width, height = png_size(png)
    # bbox_inches="tight" trims the margins: at most the full canvas, and wider than tall here
    assert 0 < height < width <= 4 * 50
    with pytest.raises(ValueError, match="`png`"):
        png_size(b"GIF89a" + bytes(30))


def test_figures_are_drawn_at_twice_the_resolution_they_are_shown_at():
    assert FIGURE_DPI == 2 * SCREEN_DPI
    png = figure_png(_figure())
    image = shown_image(png)
    assert image.width == pytest.approx(png_size(png)[0] / 2, abs=1)
    # the same figure drawn at the screen's resolution is the size it is shown at
    assert png_size(figure_png(_figure(), dpi=SCREEN_DPI))[0] == pytest.approx(image.width, abs=2)


def test_the_explorer_shows_its_figure_through_shown_image(monkeypatch):
    pytest.importorskip("ipywidgets")
    import ipywidgets as widgets

    from rlbook.widgets import _live

    shown = []
    monkeypatch.setattr(_live, "shown_image", lambda png, dpi: shown.append((png_size(png), dpi)) or "image")
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: None)
    live_explorer({"x": widgets.FloatSlider(value=1.0)}, [["x"]], lambda x: Frame(_figure(), f"x = {x}"))
    ((size, dpi),) = shown
    assert dpi == FIGURE_DPI and size[0] > 4 * SCREEN_DPI  # a 4-inch figure, more pixels than shown


def test_the_status_says_updating_while_the_figure_is_redrawn_and_clears_after(monkeypatch):
    """A figure that still shows the previous setting is marked: "updating…" is set before ``render``
    runs and cleared after, also when ``render`` fails."""
    pytest.importorskip("ipywidgets")
    import ipywidgets as widgets

    from rlbook.widgets import _live

    monkeypatch.setattr("IPython.display.display", lambda *a, **k: None)
    seen = []

    def render(x):
        seen.append(box.status.value if seen else "first")  # the first call runs inside live_explorer
        if x < 0:
            raise ValueError("x must be >= 0")
        return Frame(_figure(), f"x = {x}")

    slider = widgets.FloatSlider(value=1.0, min=-1.0)
    box = live_explorer({"x": slider}, [["x"]], render)
    assert box.status.value == "" and box.status in box.children
    slider.value = 0.5
    assert seen[-1] == _live.UPDATING and "updating" in _live.UPDATING and box.status.value == ""
    slider.value = -0.5  # render fails: the status still clears, the message shows
    assert seen[-1] == _live.UPDATING and box.status.value == "" and "must be" in box.error.value
