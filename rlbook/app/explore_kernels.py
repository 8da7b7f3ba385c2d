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
* :meth:`BoundedKernelManager.notify_disconnect`: when the last websocket of a kernel closes (its page
  was closed, reloaded or crashed: the browser closes the socket even when the shutdown request is
  never sent or never arrives, as now and then for a tab closed in headless Chromium), the kernel is
  shut down ``disconnect_grace`` seconds later unless a page has connected to it again by then.
* culling (Jupyter Server's ``MappingKernelManager.cull_idle_timeout`` / ``cull_interval``, with
  ``cull_connected`` off, set by :func:`rlbook.app.explore.voila_command`): a kernel that no page is
  connected to (a page that went away before its scripts connected, a request that never arrived) is
  shut down after that many idle seconds; a kernel with an open page is kept.
* :class:`BoundedKernelManager`: at most ``max_kernels`` kernels at once; the next page load is
  answered ``503`` with a message saying why and what to do, instead of starting another kernel
  (the ``rlbook`` template's ``error.html`` shows it).

:mod:`rlbook.app.explore` copies this file beside the app as ``rlbook_explore_kernels.py`` and Voilà
imports it from there, so it must not import ``rlbook`` (that would load torch into the server).
"""

from __future__ import annotations

import uuid

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web
from tornado.ioloop import IOLoop
from traitlets import Float, Integer

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
    disconnect_grace = Float(5.0, config=True, help="seconds after its last page's websocket closed that a kernel "
                                                    "is shut down, unless a page connected again; 0: never")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._starting: set[str] = set()
        self._stopping: set[str] = set()  # kernels being shut down: their process may be gone already

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


    def notify_disconnect(self, kernel_id):
        """Jupyter Server's count of a kernel's connections, less one; at zero, shut the kernel down after
        ``disconnect_grace`` seconds unless a page has connected again (see the module docstring)."""
        super().notify_disconnect(kernel_id)
        if self.disconnect_grace > 0 and self._kernel_connections.get(kernel_id) == 0:
            IOLoop.current().call_later(self.disconnect_grace, self._shut_down_if_still_disconnected, kernel_id)

    async def _shut_down_if_still_disconnected(self, kernel_id):
        if self._kernel_connections.get(kernel_id) != 0 or kernel_id in self._stopping or kernel_id not in self:
            return  # a page connected again, or the kernel is ending or gone already
        self.log.info("rlbook explore: no page connected to kernel %s for %s s; shutting it down", kernel_id,
                      self.disconnect_grace)
        await self.shutdown_kernel(kernel_id)


def set_xsrf_cookie(handler, notebook=None, cwd=None):
    """Voilà ``prelaunch_hook``: set the page's ``_xsrf`` cookie (Tornado sets it on first access).

    Returns None, so Voilà renders the notebook unchanged.
    """
    handler.xsrf_token  # noqa: B018  (the property sets the cookie as a side effect)
    return None
