"""Results from worker threads handed to an event loop in bursts.

``loop.run_in_executor`` and ``asyncio.wrap_future`` wake the loop once per result (a write to
its self-pipe, a handle, a chained future). A host's loop serves thousands of runs, each of
whose writes finishes on the ``fn`` threads and then on the store's writer thread: a wake-up
per write per hop. The inbox wakes the loop once for everything that finished since its last
wake-up; a slow job still holds only its own thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["LoopInbox", "inbox_of"]

_T = TypeVar("_T")
_log = logging.getLogger(__name__)
_LOG = {"component": "orchestrator"}
_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopInbox] = weakref.WeakKeyDictionary()
_inboxes_lock = threading.Lock()


class LoopInbox:
    """Callbacks posted from any thread, run on one loop, many per wake-up."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._posted: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self._scheduled = False  # a drain is queued on the loop and has not taken the list yet

    def post(self, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` on the loop soon (thread-safe)."""
        with self._lock:
            self._posted.append((callback, args))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody is left to await the result
            _log.debug("event loop closed; %d posted results dropped", len(self._posted), extra=_LOG)

    def run_in(self, executor: concurrent.futures.Executor, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        """``loop.run_in_executor(executor, fn, *args)``, its result delivered through the inbox."""
        result: asyncio.Future[_T] = self._loop.create_future()

        def job() -> None:
            try:
                value = fn(*args)
            except BaseException as exc:  # handed to the awaiting caller, as run_in_executor does
                self.post(_settle, result, None, exc)
            else:
                self.post(_settle, result, value, None)

        executor.submit(job)
        return result

    def future_of(self, future: concurrent.futures.Future[_T]) -> asyncio.Future[_T]:
        """``asyncio.wrap_future(future)``, its outcome delivered through the inbox."""
        result: asyncio.Future[_T] = self._loop.create_future()
        future.add_done_callback(lambda done: self.post(_copy, done, result))
        return result

    def _drain(self) -> None:
        with self._lock:
            posted, self._posted = self._posted, []
            self._scheduled = False
        for callback, args in posted:
            try:
                callback(*args)
            except Exception:  # one bad result must not strand the others in this burst
                _log.exception("delivering a worker thread's result failed", extra=_LOG)


def inbox_of(loop: asyncio.AbstractEventLoop) -> LoopInbox:
    """The inbox of ``loop`` (one per loop, shared by every run the loop serves)."""
    with _inboxes_lock:
        inbox = _inboxes.get(loop)
        if inbox is None:
            inbox = _inboxes[loop] = LoopInbox(loop)
        return inbox


def _settle(result: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if result.done():  # the caller stopped waiting (cancelled)
        return
    if error is not None:
        result.set_exception(error)
    else:
        result.set_result(value)


def _copy(done: concurrent.futures.Future[Any], result: asyncio.Future[Any]) -> None:
    if result.done():
        return
    if done.cancelled():
        result.cancel()
        return
    error = done.exception()
    _settle(result, None if error is not None else done.result(), error)
