"""The kernels behind ``rlbook explore``: bounded in number, shut down when their page goes away.

Voilà starts one Python kernel (~300 MB: torch and the explorers) per page load. Left alone it keeps
every one of them until the server stops: the page's own shutdown request on closing is refused
(Voilà's page reads the ``_xsrf`` token from a cookie that Voilà never sets, so the request is
rejected with ``403 '_xsrf' argument missing``; voila issue 1458), and Jupyter Server culls nothing
unless told to. A classroom reloading a tab would exhaust the machine's memory. This module, loaded
by the Voilà process only (it imports Jupyter Server, an ``rlbook[explore]`` dependency), closes
the three holes:

* :func:`set_xsrf_cookie`, Voilà's ``prelaunch_hook``: before a page's kernel starts, it asks
  Tornado for the request's XSRF token, which sets the ``_xsrf`` cookie on the page's response; the
  page's shutdown request on ``beforeunload`` then carries it and is accepted, so closing or
  reloading a page shuts its kernel down at once.
* culling (Jupyter Server's ``MappingKernelManager.cull_idle_timeout`` / ``cull_interval``, with
  ``cull_connected`` off, set by :func:`rlbook.app.explore.voila_command`): a kernel that no page is
  connected to (a tab that crashed, a laptop that went to sleep, a request that never arrived) is
  shut down after that many idle seconds; a kernel with an open page is kept. A kernel whose page
  has not connected *yet* is spared for ``BoundedKernelManager.unconnected_grace`` seconds after it
  started: Voilà runs the notebook in the kernel before it sends the page, so on a busy machine the
  page connects only after a minute or more, and Jupyter Server's culler, which sees no connection and
  no activity it counts, used to shut the kernel down in the middle of rendering (the page then never
  showed its explorer: "Kernel died while waiting for execute reply" in the server's log).
* :class:`BoundedKernelManager`: at most ``max_kernels`` kernels at once; the next page load is
  answered ``503`` with a message saying why and what to do, instead of starting another kernel
  (the ``rlbook`` template's ``error.html`` shows it).

:mod:`rlbook.app.explore` copies this file beside the app as ``rlbook_explore_kernels.py`` and Voilà
imports it from there, so it must not import ``rlbook`` (that would load torch into the server).
"""

from __future__ import annotations

import time
import uuid

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web
from traitlets import Integer

__all__ = ["BoundedKernelManager", "set_xsrf_cookie", "limit_message", "LIMIT_REASON"]

LIMIT_REASON = "Too many explorer pages open"  # the error page's heading (an HTTP reason phrase)


def limit_message(max_kernels: int, idle_timeout: int) -> str:
    """The page text shown to a visitor past the limit of ``max_kernels`` open explorer pages."""
    return (f"rlbook explore: {max_kernels} explorer page{'s are' if max_kernels != 1 else ' is'} open already, "
            f"the most this server runs at once (each page has its own Python kernel). Close one of them and "
            f"reload this page; a page closed without notice frees its kernel within {idle_timeout} s. "
            f"Whoever started the server can allow more with: rlbook explore --max-kernels N")


class BoundedKernelManager(AsyncMappingKernelManager):
    """Jupyter Server's kernel manager, refusing to run more than ``max_kernels`` kernels at once.

    Kernels still starting count too (the check and the reservation happen without awaiting, so
    simultaneous page loads cannot overshoot). Past the limit :meth:`start_kernel` raises
    ``tornado.web.HTTPError(503)`` with :func:`limit_message`, which Voilà shows as the page.
    """

    max_kernels = Integer(8, config=True, help="the most kernels (explorer pages) alive at once; >= 1")
    unconnected_grace = Integer(600, config=True, help="seconds after its start during which a kernel whose page "
                                "has never connected is not culled (the page is still being rendered)")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._starting: set[str] = set()
        self._stopping: set[str] = set()  # kernels being shut down: their process may be gone already
        self._started_at: dict[str, float] = {}  # kernel id -> time.monotonic() at its start
        self._connected_once: set[str] = set()  # kernels a page has connected to at least once

    async def start_kernel(self, *, kernel_id: str | None = None, **kwargs) -> str:  # type: ignore[override]
        """Start a kernel unless ``max_kernels`` are alive or starting; see the class docstring."""
        if kernel_id is not None and kernel_id in self:
            return await super().start_kernel(kernel_id=kernel_id, **kwargs)
        # a kernel being shut down no longer counts: its process can end before Jupyter Server forgets
        # it, and a page reloaded just after another was closed was refused (seen in CI)
        alive = (set(self.list_kernel_ids()) | self._starting) - self._stopping
        if len(alive) >= max(1, self.max_kernels):
            self.log.warning("rlbook explore: %d kernels alive, the limit; page load refused", len(alive))
            raise web.HTTPError(503, limit_message(self.max_kernels, self.cull_idle_timeout), reason=LIMIT_REASON)
        kernel_id = kernel_id or str(uuid.uuid4())
        self._starting.add(kernel_id)
        self._started_at[kernel_id] = time.monotonic()
        try:
            return await super().start_kernel(kernel_id=kernel_id, **kwargs)
        finally:
            self._starting.discard(kernel_id)


    async def shutdown_kernel(self, kernel_id, now=False, restart=False):  # type: ignore[override]
        """Jupyter Server's shutdown; while it runs, the kernel no longer counts against ``max_kernels``."""
        self._stopping.add(kernel_id)
        try:
            return await super().shutdown_kernel(kernel_id, now=now, restart=restart)
        finally:
            self._stopping.discard(kernel_id)

    def notify_connect(self, kernel_id):
        """Jupyter Server's count of a page's connection, remembering that the kernel's page connected."""
        self._connected_once.add(kernel_id)
        super().notify_connect(kernel_id)

    async def cull_kernel_if_idle(self, kernel_id):
        """Jupyter Server's culling, except for a kernel whose page has not connected yet, for
        ``unconnected_grace`` seconds after the kernel started (see the module's docstring)."""
        alive = set(self.list_kernel_ids()) | self._starting
        for gone in set(self._started_at) - alive:  # forget kernels that have ended
            self._started_at.pop(gone, None)
            self._connected_once.discard(gone)
        started = self._started_at.get(kernel_id)
        if (kernel_id not in self._connected_once and started is not None
                and time.monotonic() - started < self.unconnected_grace):
            return
        await super().cull_kernel_if_idle(kernel_id)


def set_xsrf_cookie(handler, notebook=None, cwd=None):
    """Voilà ``prelaunch_hook``: set the page's ``_xsrf`` cookie (Tornado sets it on first access).

    Returns None, so Voilà renders the notebook unchanged.
    """
    handler.xsrf_token  # noqa: B018  (the property sets the cookie as a side effect)
    return None
