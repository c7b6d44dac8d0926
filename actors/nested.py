"""``OrchestratorCaller``: another soloist run, used as a tool, so runs can be nested.

A call ``prefix + tool`` is handed to the named run with ``handoff``: the tool runs in that
run's subagents, through that run's caller, under that run's semaphore. The outer run's
own handoff holds its permit for as long as the nested call runs (the subagent serving it
waits for the answer), so every nested call counts as one of the outer run's four, and
also as one of the inner run's four: neither run ever has more than four calls in flight
on its behalf, and a batch fanned out by the outer run cannot multiply through nesting.

Do not nest a run into itself (directly or through a cycle): its calls would wait for
permits that they themselves hold.

It lives at the top of ``actors`` (not in ``callers``): it drives the handoff layer and the
``Orchestrator`` facade, which both sit above the callers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from actors.callers.protocol import PooledCaller, ToolCallResult
from actors.exceptions import (
    NestedRunUnavailable,
    NoToolCaller,
    OrchestratorClosed,
    OrchestratorNotFound,
    ToolReportedError,
)
from actors.handoffs.api import Call, handoff
from actors.orchestrator.facade import Orchestrator
from cluster.process import Table, process_registry

__all__ = ["OrchestratorCaller"]


# Handles of nested runs, per (Ray session, run name): attaching costs a round trip.
_HANDLES: Table[str, Orchestrator[Any]] = process_registry().nested_runs


def _attach(run: str) -> Orchestrator[Any]:
    handle = _HANDLES.get(run)
    if handle is None:
        try:
            handle = Orchestrator.attach(run)
        except OrchestratorNotFound as exc:
            raise NestedRunUnavailable(f"nested run {run!r} is not running: {exc}") from exc
        _HANDLES.put(run, handle)
    return handle


def _forget(run: str, handle: Orchestrator[Any]) -> None:
    _HANDLES.discard(run, handle)


class OrchestratorCaller:
    """A ``ToolCaller`` whose tools are the tools of another run, named ``run``.

    ``prefix`` is stripped before the call reaches the nested run (``"inner.sleep"`` ->
    ``"sleep"``) and tells a ``CompositeCaller`` which names are this caller's. Without a
    prefix, ``tools`` lists the names served; when neither is given they are read once from
    the nested run's caller (which must then be running and list its names).
    """

    def __init__(self, run: str, *, prefix: str = "", tools: Iterable[str] | None = None,
                 timeout: float | None = None, replicas: int = 1) -> None:
        if not isinstance(run, str) or not run.strip():
            raise ValueError(f"OrchestratorCaller needs the name of a run, got {run!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0 or None, got {timeout!r}")
        self.run = run
        self.prefix = prefix
        self.timeout = timeout
        self._replicas = replicas
        self.pool_key = f"nested-{run}-{prefix or 'all'}"
        if tools is None and not prefix:
            tools = self._read_tools()
        # Inner tool names this caller serves; None: every name under ``prefix``.
        self._tools: frozenset[str] | None = frozenset(tools) if tools is not None else None

    def _read_tools(self) -> list[str]:
        caller = _attach(self.run).caller
        if not isinstance(caller, PooledCaller):
            raise TypeError(
                f"OrchestratorCaller({self.run!r}): the nested run's caller {type(caller).__name__} cannot list its tools; "
                "pass prefix=... or tools=[...]"
            )
        return list(caller.names())

    @property
    def label(self) -> str:
        return f"nested run {self.run!r}"

    def __repr__(self) -> str:
        return f"OrchestratorCaller({self.run!r}, prefix={self.prefix!r})"

    def _inner(self, name: str) -> str | None:
        if not name.startswith(self.prefix):
            return None
        inner = name[len(self.prefix):]
        if not inner or (self._tools is not None and inner not in self._tools):
            return None
        return inner

    def owns(self, name: str) -> bool:
        return self._inner(name) is not None

    def names(self) -> list[str]:
        return sorted(self.prefix + t for t in self._tools) if self._tools is not None else []

    def pool_options(self, name: str) -> tuple[int, float]:
        """One subagent per tool is plenty: it only waits on the nested run."""
        return self._replicas, 0.0

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        """Hand ``name`` (prefix stripped) to the nested run; its tool errors stay tool errors."""
        inner = self._inner(name)
        if inner is None:
            return ToolCallResult.error(f"{self.label} does not serve {name!r} (prefix {self.prefix!r}, tools: "
                                        f"{', '.join(self.names()) or 'any under the prefix'})")
        handle = await asyncio.to_thread(_attach, self.run)
        try:
            await handle.version()  # a closed nested run refuses calls, even if its caller is cached here
            output = await handoff(handle, Call(inner, arguments, timeout=self.timeout), Any)
        except (ToolReportedError, NoToolCaller) as exc:
            return ToolCallResult.error(f"{self.label}: {exc}")
        except OrchestratorClosed as exc:
            _forget(self.run, handle)
            raise NestedRunUnavailable(f"nested run {self.run!r} closed: {exc}") from exc
        return ToolCallResult.of_json(output)
