"""Orbax's restore event loops, made to finish the reads a failed restore leaves in flight.

Used by ``checkpoint.py`` around each ``CheckpointManager.restore``; see :class:`_DrainingLoop`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

# How long a closing restore loop waits for orbax's cancelled reads to wind down.
_DRAIN_SECONDS = 30.0


class _DrainingLoop(asyncio.SelectorEventLoop):
    """An event loop that, when closed, first cancels the tasks still pending on it and awaits them.

    Orbax runs each restore on a fresh loop (``run_until_complete`` of an ``asyncio.gather`` of
    one read per array, then ``close``). When one read fails (a truncated file), ``gather`` raises
    at once and the other reads are left pending on the closed loop. Garbage collection later closes
    their coroutines; orbax's read catches the ``GeneratorExit`` (``except BaseException``) and
    raises in its place, which Python prints as "Exception ignored in: <coroutine object
    _read_array_index_and_device_put ...>" with a traceback, at whatever moment the collector runs
    (during training, at exit, or never). Cancelled and awaited here, each read ends with its
    error retrieved, while the step that failed is being reported.
    """

    def close(self) -> None:
        if not self.is_running() and not self.is_closed():
            pending = [task for task in asyncio.all_tasks(self) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.run_until_complete(asyncio.wait(pending, timeout=_DRAIN_SECONDS))
            for task in pending:
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: the failed step's own error says what failed
        super().close()


@contextlib.contextmanager
def abandoned_reads_awaited() -> Iterator[None]:
    """Orbax's restore loops, made while this is active, await their abandoned reads on close."""
    policy = asyncio.get_event_loop_policy()
    if type(policy) is not asyncio.DefaultEventLoopPolicy or "new_event_loop" in vars(policy):
        yield  # someone else's loops (uvloop, a test's policy), or already active: left alone
        return
    policy.new_event_loop = _DrainingLoop  # type: ignore[method-assign]
    try:
        yield
    finally:
        del policy.new_event_loop  # type: ignore[method-assign]
