"""Model calls under a shared endpoint scope, and the usage they report.

``ModelEndpoint``: a model endpoint (base URL and model, or a scope the user names) as one
semaphore scope, so every run that calls it holds one cap and one budget together, across
the cluster. ``endpoint.call(estimate_tokens=...)`` is the hook a model path wraps each
request in: it waits for a permit (and for room in the budget), and on exit releases it with
the usage the response reported.

``report_usage(usage)``: record one response's usage where it was made: the metrics
(``soloist_llm_requests_total``, ``soloist_llm_tokens_total``) and, inside a handoff's body,
the body's ``UsageMeter``, which the subagent replica reads when the body returns (to settle
its own lease on the run's scope, and to send the usage back to the run). ``endpoint.call``
reports for you; a model path without an endpoint calls ``report_usage`` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Any, Literal
from urllib.parse import urlsplit

import ray
from pydantic import BaseModel, ConfigDict, Field

from cluster import metrics
from cluster.exceptions import SemaphoreUnavailable
from cluster.process import Table
from cluster.semaphore._budget import Budget
from cluster.semaphore._models import HARD_MAX_PERMITS, Lease
from cluster.semaphore.client import ClusterSemaphore

__all__ = ["TokenUsage", "UsageMeter", "ModelEndpoint", "ModelCall", "endpoint_scope", "report_usage", "metered",
           "current_meter"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

RequestOutcome = Literal["ok", "error"]


class TokenUsage(BaseModel):
    """Tokens one or more model responses reported (``requests`` of them), for ``model``."""

    model_config = ConfigDict(frozen=True)

    model: str = ""
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    requests: int = Field(1, ge=0)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(model=other.model or self.model, input_tokens=self.input_tokens + other.input_tokens,
                          output_tokens=self.output_tokens + other.output_tokens,
                          requests=self.requests + other.requests)


class UsageMeter:
    """The usage reported inside one handoff body (thread-safe: a sync skill reports from its thread).

    ``owner``: the actor running the body, when it answers the semaphore's probes
    (``holds_leases``, ``renew_leases``: a subagent replica does): the endpoint leases its
    model calls take are then guarded by it, like its own lease on the run's scope.
    """

    def __init__(self, owner: Any = None) -> None:
        self.owner = owner
        self._lock = threading.Lock()
        # The sum of every report; None until the first one.
        self._usage: TokenUsage | None = None

    def add(self, usage: TokenUsage) -> None:
        with self._lock:
            self._usage = usage if self._usage is None else self._usage + usage

    @property
    def usage(self) -> TokenUsage | None:
        """Everything reported so far (None: nothing was)."""
        with self._lock:
            return self._usage


_METER: ContextVar[UsageMeter | None] = ContextVar("soloist_usage_meter", default=None)


def current_meter() -> UsageMeter | None:
    """The meter of the handoff body running in this context, if any."""
    return _METER.get()


@contextlib.contextmanager
def metered(owner: Any = None) -> Iterator[UsageMeter]:
    """A fresh meter for the tasks created in this block (a task copies its context when it
    is created): what their bodies report with ``report_usage`` adds up there. ``owner``: see
    ``UsageMeter``."""
    meter = UsageMeter(owner)
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


def report_usage(usage: TokenUsage, *, outcome: RequestOutcome = "ok") -> None:
    """Record one model request and the usage its response reported (see the module docstring).

    Call it once per response, in the process that made the request; a failed request is
    reported with ``outcome="error"`` (and whatever usage is known, usually none).
    """
    if not isinstance(usage, TokenUsage):
        raise TypeError(f"report_usage takes a TokenUsage, got {type(usage).__name__}")
    metrics.record_llm_request(usage.model or "unknown", outcome, usage.input_tokens, usage.output_tokens)
    meter = _METER.get()
    if meter is not None:
        meter.add(usage)


def endpoint_scope(base_url: str, model: str) -> str:
    """The scope every run calling ``model`` at ``base_url`` shares: ``model:<url>#<model>``,
    with the URL's scheme and host lower-cased and no trailing slash."""
    parts = urlsplit(base_url.strip())
    url = f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"
    return f"model:{url}#{model}"


# This process's semaphores of the endpoints it called: one facade per (Ray session, scope).
# (A table of its own: cluster.process's registry is not this package's to extend.)
_OPENED: Table[str, ClusterSemaphore] = Table("semaphore.endpoints", per_session=True)


class ModelCall:
    """One model request inside ``ModelEndpoint.call``: report the response's usage with ``report``."""

    def __init__(self, model: str, lease: Lease | None) -> None:
        self.model = model
        self.lease = lease
        self.usage: TokenUsage | None = None

    def report(self, *, input_tokens: int, output_tokens: int, model: str | None = None) -> None:
        """The usage the response reported (its prompt/input and completion/output tokens)."""
        self.usage = TokenUsage(model=model or self.model, input_tokens=input_tokens, output_tokens=output_tokens)


class ModelEndpoint(BaseModel):
    """A model endpoint as a semaphore scope shared by every run that calls it.

    ``ModelEndpoint.of(base_url, model)`` derives the scope from the URL and the model
    (``endpoint_scope``); ``scope=`` names one instead (several models of one provider
    account under one limit). ``budget``: the provider's limits, e.g.
    ``Budget.per_minute(requests=500, tokens=30_000)``. The first process to open the scope
    sets its configuration; later ones join it as it is. Pickles by value.
    """

    model_config = ConfigDict(frozen=True)

    scope: str = Field(min_length=1)
    model: str = ""
    budget: Budget | None = None
    permits: int = Field(HARD_MAX_PERMITS, ge=1, le=HARD_MAX_PERMITS)

    @classmethod
    def of(cls, base_url: str, model: str, *, scope: str | None = None, budget: Budget | None = None,
           permits: int = HARD_MAX_PERMITS) -> ModelEndpoint:
        return cls(scope=scope or endpoint_scope(base_url, model), model=model, budget=budget, permits=permits)

    def semaphore(self) -> ClusterSemaphore:
        """This process's facade on the scope: joined as it is, or created with this
        endpoint's cap and budget (blocking: one round trip the first time)."""
        opened = _OPENED.get(self.scope)
        if opened is not None:
            return opened
        # Opened outside the table's lock: a round trip (see cluster.process on lock discipline).
        fresh = ClusterSemaphore.open(self.scope, permits=self.permits, budget=self.budget)
        if self.budget is not None and fresh.budget != self.budget:
            logger.warning("model endpoint %r: joined its scope with budget %r, not the %r asked for (the first "
                           "process to open a scope sets its budget)", self.scope, fresh.budget, self.budget,
                           extra=_LOG_EXTRA)
        return _OPENED.get_or_create(self.scope, lambda: fresh)

    async def _acquire(self, estimate_tokens: int | None) -> tuple[ClusterSemaphore, Lease]:
        meter = _METER.get()
        owner = None if meter is None else meter.owner  # a replica guards the leases of its bodies' calls
        semaphore = await asyncio.to_thread(self.semaphore)
        try:
            return semaphore, await semaphore.acquire(tokens=estimate_tokens, owner=owner)
        except SemaphoreUnavailable:
            # Destroyed since this process opened it: open it again, once.
            _OPENED.discard(self.scope, semaphore)
            semaphore = await asyncio.to_thread(self.semaphore)
            return semaphore, await semaphore.acquire(tokens=estimate_tokens, owner=owner)

    @contextlib.asynccontextmanager
    async def call(self, *, estimate_tokens: int | None = None) -> AsyncIterator[ModelCall]:
        """Hold a permit of the endpoint's scope for one model request.

        Waits for the permit and, on a budgeted scope, for room for ``estimate_tokens`` (None:
        the budget's ``reserve_tokens``). On exit the permit is released with the usage given
        to ``ModelCall.report`` (the reservation stands when none was), and the request is
        recorded with ``report_usage`` (``outcome="error"`` when the block raised). Without
        Ray there is no cluster to share a cap with: the request is only recorded. Inside a
        handoff's body the lease is guarded by the replica running it (see ``UsageMeter``):
        a replica paused past the lease's TTL keeps it, and its request still counts.
        """
        semaphore = lease = None
        if ray.is_initialized():
            semaphore, lease = await self._acquire(estimate_tokens)
        call = ModelCall(self.model, lease)
        outcome: RequestOutcome = "error"
        try:
            yield call
            outcome = "ok"
        finally:
            usage = call.usage
            if semaphore is not None and lease is not None:
                # Sent without waiting: the block's exit is never held up (nor lost to a cancellation).
                semaphore.release_nowait(lease, used_tokens=None if usage is None else usage.total_tokens)
            report_usage(usage if usage is not None else TokenUsage(model=self.model), outcome=outcome)
