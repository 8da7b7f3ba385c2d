"""A kernel client that cannot miss a message: waits on a kernel's sockets in short slices.

Why. An asyncio ZeroMQ socket learns that a message has arrived from the socket's file descriptor,
which ZeroMQ signals *edge-triggered*: it turns readable once when the socket's state changes, and
any call that reads the socket's events (``zmq.EVENTS``) clears it. When that edge is consumed
before the event loop sees it, the message sits in the socket, readable, while the coroutine
waiting for it sleeps on. ``jupyter_client``'s asynchronous channel waits with a single
``socket.poll(timeout)``, so with no timeout (how nbclient, and Voilà through it, wait for a cell's
``execute_reply``) the wait never ends: the kernel is idle, its reply is in the client's socket,
and the page shows "Executing 6 of 17" for good. This was measured on the book's explorers (Voilà
0.5.13, jupyter_client 8.10, pyzmq 27.3): in the hung state the waiting DEALER socket reported
``POLLIN`` with its poll future still pending, on about one page load in five on a 2-core machine.

What. :class:`WakefulChannel` waits in slices of :data:`POLL_SLICE` seconds; every new poll checks
the socket's events before it sleeps (pyzmq does so when it registers a poll), so a missed wake-up
costs at most one slice instead of forever. Nothing else changes: the same messages in the same
order, the same ``queue.Empty`` after ``timeout``. :class:`WakefulKernelClient` is jupyter_client's
asynchronous client with these channels.

The edge-triggered signal is libzmq's documented behaviour (``zmq_getsockopt(3)``, ``ZMQ_FD``: "the
ability to read from the returned file descriptor does not necessarily indicate that messages are
available", and the events must be re-read after every operation); pyzmq's asyncio layer relies on
it. The same class of lost wake-up on the kernel's side is fixed in ipykernel (pull request 1529;
the ipykernel 7.4.0 used here has it).

Where. ``rlbook explore`` configures Voilà with it (``--KernelManager.client_factory``; Voilà starts
the client that executes the page's cells from its kernel manager); ``rlbook run``,
``tools/build_notebooks.py`` and the grader (:class:`rlbook.app.grading.SandboxedKernelManager`)
execute notebooks with it. This module imports only ``jupyter_client``: ``rlbook explore`` copies it beside
the app as ``rlbook_kernel_client.py`` so that the Voilà process never imports ``rlbook`` (torch).
"""

from __future__ import annotations

import time
from queue import Empty
from typing import Any

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import Type, default

__all__ = ["POLL_SLICE", "WakefulChannel", "WakefulKernelClient", "WakefulKernelManager"]

POLL_SLICE = 0.5  # s: the longest a message already in the socket can wait unread


class WakefulChannel(AsyncZMQSocketChannel):
    """``jupyter_client``'s asynchronous channel, waiting in slices of :data:`POLL_SLICE` seconds."""

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:  # type: ignore[override]
        """The next message on the channel.

        Args:
            timeout: seconds to wait in all; ``None`` waits until a message comes.
        Returns:
            the deserialised message (a dict with ``header``, ``parent_header``, ``content``, ...).
        Raises:
            queue.Empty: no message within ``timeout`` seconds.
            ValueError: ``timeout`` is negative.
        """
        if timeout is not None and timeout < 0:
            raise ValueError(f"`timeout` must be >= 0 seconds or None, got {timeout}")
        assert self.socket is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE if deadline is None else min(POLL_SLICE, max(0.0, deadline - time.monotonic()))
            if await self.socket.poll(int(left * 1000)):
                return await self._recv()
            if deadline is not None and time.monotonic() >= deadline:
                raise Empty


class WakefulKernelClient(AsyncKernelClient):
    """``jupyter_client``'s asynchronous kernel client whose channels are :class:`WakefulChannel`."""

    shell_channel_class = Type(WakefulChannel)  # type: ignore[assignment]
    iopub_channel_class = Type(WakefulChannel)  # type: ignore[assignment]
    stdin_channel_class = Type(WakefulChannel)  # type: ignore[assignment]
    control_channel_class = Type(WakefulChannel)  # type: ignore[assignment]


class WakefulKernelManager(AsyncKernelManager):
    """``jupyter_client``'s asynchronous kernel manager, handing out :class:`WakefulKernelClient` s
    (for ``nbclient.NotebookClient(kernel_manager_class=...)``)."""

    @default("client_factory")
    def _wakeful_client_factory(self) -> type:
        return WakefulKernelClient
