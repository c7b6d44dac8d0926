"""The page server: a Starlette application over a ``RunSource``.

Pages and assets are files shipped in the package (``static/``); data is JSON under
``/api/``; a run's live changes are server-sent events fed by ``Orchestrator.subscribe``.
Every answer carries a strict Content-Security-Policy (scripts and styles from this server
only, nothing inline), so even a value that slipped past the page's escaping could not run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from cluster.cli.ui.exceptions import ActionRefused, ActionsDisabled, BadToken, CrossSiteRequest, RunNotFoundInUi, UiError
from cluster.cli.run_index import DEFAULT_LIMIT, MAX_PAGE_LIMIT, check_query
from cluster.cli.ui.models import ErrorBody, StateView
from cluster.cli.ui.sampler import InFlightSampler
from cluster.cli.ui.security import Guard
from cluster.cli.ui.source import DEFAULT_PAGE, RunSource
from cluster.cli.ui.timeline import entry_from_change

__all__ = ["create_app"]

_log = logging.getLogger("soloist.ui")
_LOG_EXTRA = {"component": "ui"}

STATIC_DIR = resources.files("cluster.cli.ui") / "static"
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_MAX_LIVE_ENTRIES = 100  # entries per live event; a bigger burst tells the page to reload its first page
_KEEPALIVE_SECONDS = 15.0
_MAX_BODY = 16_384


class AnswerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    interrupt_id: str = Field(min_length=1)
    approve: bool
    reason: str | None = Field(default=None, max_length=4_000)


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    new_name: str = Field(min_length=1, max_length=200)
    at_version: int = Field(ge=0)


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, BadToken):
        return 401
    if isinstance(exc, (ActionsDisabled, CrossSiteRequest)):
        return 403
    if isinstance(exc, RunNotFoundInUi):
        return 404
    if isinstance(exc, (ValueError, TypeError, ValidationError)):
        return 400
    return 409  # the library refused the action (interrupt not open, history compacted, ...)


def _error(exc: BaseException) -> JSONResponse:
    status = _status_of(exc)
    return JSONResponse(ErrorBody(error=str(exc), type=type(exc).__name__).model_dump(), status_code=status)


def _json(model: BaseModel) -> Response:
    return Response(model.model_dump_json(), media_type="application/json")


def _sse(event: str, data: Any) -> bytes:
    body = data.model_dump_json() if isinstance(data, BaseModel) else json.dumps(data, separators=(",", ":"))
    return f"event: {event}\ndata: {body}\n\n".encode()


class _Guarded:
    """ASGI middleware: refuses a foreign ``Host`` and adds the security headers to every answer."""

    def __init__(self, app: ASGIApp, guard: Guard, streams: "_Streams") -> None:
        self.app = app
        self.guard = guard
        self.streams = streams

    def stop_streams(self) -> None:
        """End every live stream within a second (before the server shuts down)."""
        self.streams.stopping = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
        try:
            self.guard.check_host(host)
        except CrossSiteRequest as exc:
            await _error(exc)(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] += [
                    (b"content-security-policy", _CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY"),
                    (b"cache-control", b"no-store"),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


class _Streams:
    """Shared by the live streams: set ``stopping`` and each ends at its next wake-up."""

    stopping = False


def create_app(source: RunSource, guard: Guard, *, sampler: InFlightSampler | None = None) -> _Guarded:
    """The page server's ASGI application."""
    sampler = sampler or InFlightSampler()
    streams = _Streams()

    def reads(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request)
            except (UiError, ValueError, LookupError) as exc:
                return _error(exc)
            except Exception as exc:  # a run that cannot be read: the page shows why
                _log.warning("%s failed: %s: %s", request.url.path, type(exc).__name__, exc, extra=_LOG_EXTRA)
                return JSONResponse(ErrorBody(error=f"{type(exc).__name__}: {exc}", type=type(exc).__name__).model_dump(),
                                    status_code=500)

        return endpoint

    def action(fn: Callable[[Request, dict[str, Any]], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                guard.check_action(request.headers)
                raw = await request.body()
                if len(raw) > _MAX_BODY:
                    raise ValueError(f"the request body is larger than {_MAX_BODY} bytes")
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the request body must be a JSON object")
                return await fn(request, body)
            except Exception as exc:  # every refusal, validation or library error goes back to the page
                _log.info("action %s refused: %s: %s", request.url.path, type(exc).__name__, exc, extra=_LOG_EXTRA)
                return _error(exc)

        return endpoint

    def name_of(request: Request) -> str:
        name = request.query_params.get("name", "")
        if not name:
            raise ValueError("name= is required (the run's name)")
        return name

    def int_param(request: Request, key: str, default: int | None) -> int | None:
        text = request.query_params.get(key)
        if text in (None, ""):
            return default
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{key}= must be a whole number, got {text!r}") from None

    async def page(request: Request) -> Response:
        return FileResponse(str(STATIC_DIR / "index.html"), media_type="text/html")

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204)

    @reads
    async def runs(request: Request) -> Response:
        query = check_query(int_param(request, "offset", 0), int_param(request, "limit", DEFAULT_LIMIT),
                            request.query_params.get("status") or None, max_limit=MAX_PAGE_LIMIT)
        listed, pools = await asyncio.gather(source.list_runs(offset=query.offset, limit=query.limit, status=query.status),
                                             source.pools())
        rows = [row.model_copy(update={"in_flight": sampler.latest(row.name)}) if row.live else row for row in listed.runs]
        return _json(listed.model_copy(update={"runs": rows, "actions": guard.allow_actions, "pools": pools}))

    @reads
    async def run(request: Request) -> Response:
        name = name_of(request)
        detail = await source.detail(name, actions=guard.allow_actions, with_state=False)
        if detail.live and request.query_params.get("inflight", "1") != "0":
            detail = detail.model_copy(update={"in_flight": sampler.series(name)})
        return _json(detail)

    @reads
    async def state(request: Request) -> Response:
        detail = await source.detail(name_of(request), actions=guard.allow_actions, with_state=True)
        return _json(StateView(version=detail.version, state=detail.state, state_note=detail.state_note))

    @reads
    async def history(request: Request) -> Response:
        page_ = await source.history(name_of(request), before=int_param(request, "before", None),
                                     limit=int_param(request, "limit", DEFAULT_PAGE) or DEFAULT_PAGE)
        return _json(page_)

    @reads
    async def events(request: Request) -> Response:
        name = name_of(request)
        since = int_param(request, "since", 0) or 0
        return StreamingResponse(_event_stream(source, sampler, streams, name, since), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    @action
    async def answer(request: Request, body: dict[str, Any]) -> Response:
        req = AnswerRequest.model_validate(body)
        return _json(await source.answer(req.name, req.interrupt_id, approve=req.approve, reason=req.reason or None))

    @action
    async def fork(request: Request, body: dict[str, Any]) -> Response:
        req = ForkRequest.model_validate(body)
        return _json(await source.fork(req.name, req.new_name, at_version=req.at_version))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:
            await sampler.stop()

    app = Starlette(
        routes=[
            Route("/", page),
            Route("/run", page),
            Route("/favicon.ico", no_icon),
            Route("/api/runs", runs),
            Route("/api/run", run),
            Route("/api/state", state),
            Route("/api/history", history),
            Route("/api/events", events),
            Route("/api/answer", answer, methods=["POST"]),
            Route("/api/fork", fork, methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(STATIC_DIR)), name="static"),
        ],
        lifespan=lifespan,
    )
    return _Guarded(app, guard, streams)


async def _event_stream(source: RunSource, sampler: InFlightSampler, streams: _Streams, name: str,
                        since: int) -> AsyncIterator[bytes]:
    """``changes`` events (batched), ``inflight`` samples, ``end`` when the run stops."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    done = object()

    async def pump() -> None:
        try:
            async for change in source.changes(name, since):
                await queue.put(change)
        except Exception as exc:  # reported to the page, which shows it and stops following
            await queue.put(exc)
        finally:
            await queue.put(done)

    task = asyncio.create_task(pump())
    loop = asyncio.get_running_loop()
    last_sample: int | None = None
    quiet_since = loop.time()
    try:
        yield b"retry: 2000\n\n"
        while not streams.stopping:
            try:
                first = await asyncio.wait_for(queue.get(), 1.0)
            except asyncio.TimeoutError:
                first = None
            items = [] if first is None else [first]
            while items and items[-1] is not done and not isinstance(items[-1], Exception) and not queue.empty():
                items.append(queue.get_nowait())
            changes = [c for c in items if c is not done and not isinstance(c, Exception)]
            if changes:
                states = [c for c in changes if c.kind != "agent_state"]
                entries = [entry_from_change(c) for c in states[-_MAX_LIVE_ENTRIES:]]
                yield _sse("changes", {
                    "version": max((c.version for c in changes), default=since),
                    "count": len(states),
                    "skipped": max(0, len(states) - _MAX_LIVE_ENTRIES),
                    "entries": [e.model_dump(mode="json") for e in entries],
                    "agents": [c.agent for c in changes if c.kind == "agent_state" and c.agent is not None],
                })
                quiet_since = loop.time()
            sample = sampler.latest(name)
            if sample is not None and sample != last_sample:
                last_sample = sample
                yield _sse("inflight", {"at": time.time(), "in_flight": sample})
            failure = next((c for c in items if isinstance(c, Exception)), None)
            if failure is not None:
                yield _sse("failed", {"error": f"{type(failure).__name__}: {failure}"})
                return
            if done in items:
                yield _sse("end", {"run": name})
                return
            if loop.time() - quiet_since > _KEEPALIVE_SECONDS:
                quiet_since = loop.time()
                yield b": keepalive\n\n"
    finally:
        task.cancel()
