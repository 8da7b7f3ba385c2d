"""Close a training loop's progress bar so that it reads as finished, also when the loop stopped early."""

from __future__ import annotations


def close_progress(bar, stopped: str | None = None) -> None:
    """Close the tqdm ``bar`` of a training loop as complete, with ``stopped`` as its note.

    A loop that stops before its budget (a return threshold met, a completion cap reached) leaves
    ``bar.n < bar.total``; tqdm's notebook bar then turns red (``bar_style="danger"``), the sign
    it gives for a loop that crashed, and the saved page shows a red bar at 17 %. One that
    overshoots its budget by a partial batch shows ``60410/?``. Here the total becomes the steps
    actually run, so the bar closes full and green, and the description says why it ended early,
    e.g. ``"PPO, stopped at 475"``.

    Args:
        bar: a ``tqdm`` instance (console or notebook, possibly disabled) in manual mode (``update``).
        stopped: a short note, e.g. ``"stopped at 475"``; None when the loop ran its whole budget.
    """
    if not bar.disable:
        if stopped:
            bar.set_description_str(f"{bar.desc}, {stopped}", refresh=False)
        if bar.total != bar.n:
            bar.total = bar.n
            container = getattr(bar, "container", None)  # the notebook bar keeps its own maximum
            if container is not None and bar.n > 0:
                container.children[1].max = bar.n
        bar.refresh()
    bar.close()
