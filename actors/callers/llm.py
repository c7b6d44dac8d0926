"""An LLM subagent: ``LlmCaller`` serves an OpenAI-compatible chat-completions endpoint as tools.

Works with any server that speaks ``POST {base_url}/chat/completions`` (OpenAI, vLLM,
Ollama, llama.cpp). Base URL, model and key come from arguments or from the environment
(``SOLOIST_LLM_BASE_URL``, ``SOLOIST_LLM_MODEL``, ``OPENAI_API_KEY``), read where the caller
is built, so subagents on other nodes need no environment of their own. The transport is the
official ``openai`` SDK (``AsyncOpenAI`` with ``base_url``): its timeouts, and its retries of
429, 408, 409, 5xx, timeouts and connection errors with ``Retry-After`` honoured; soloist sets
the delay between attempts (exponential from ``backoff``, at most ``max_backoff``) and records
it. Other 4xx fail at once. The output records the token usage, the attempts and the delays
slept; the model's tool calls become ``execute_tool`` transitions through
``tool_call_transitions``.

The endpoint is a shared semaphore scope (``LlmConfig.endpoint()``: derived from base URL and
model, or ``scope=``): every run calling it holds one cap of four requests in flight across
the cluster, and one ``budget`` (requests and tokens per minute) when the config has one
(``SOLOIST_LLM_REQUESTS_PER_MINUTE``, ``SOLOIST_LLM_TOKENS_PER_MINUTE``). Each request
reserves an estimate (its text's length / 3 plus ``max_tokens``, or
``reserve_output_tokens``) and is settled with the usage the response reports.

Tools (under ``prefix``, default ``"llm."``): ``chat`` (``ChatInput`` -> ``ChatOutput``),
``classify`` (a code-search task -> type, complexity, keywords) and ``summarise``
(a run's summary -> a short text); the last two serve ``soloist run --provider``.
"""

from __future__ import annotations

import email.utils
import functools
import json
import os
import re
import time
import uuid
from contextvars import ContextVar
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from actors.callers.protocol import ToolCallResult
from actors.exceptions import (
    LlmBadResponse,
    LlmConfigError,
    LlmError,
    LlmRequestRejected,
    LlmTimeout,
    LlmUnavailable,
)
from coordinators import TransitionBatch
from coordinators.builtin import TASK_TYPES
from cluster.semaphore import Budget, ModelEndpoint, TokenUsage, budget_of, report_usage

__all__ = [
    "LlmConfig", "LlmCaller", "ChatMessage", "ToolSpec", "ChatInput", "ChatOutput", "ToolCallRequest", "Usage",
    "chat", "metered_chat", "estimate_tokens", "tool_call_transitions", "TASK_TYPES",
]

ENV_BASE_URL, ENV_MODEL, ENV_API_KEY = "SOLOIST_LLM_BASE_URL", "SOLOIST_LLM_MODEL", "OPENAI_API_KEY"
ENV_RPM, ENV_TPM = "SOLOIST_LLM_REQUESTS_PER_MINUTE", "SOLOIST_LLM_TOKENS_PER_MINUTE"


def _env_budget() -> Budget | None:
    """The budget ``SOLOIST_LLM_REQUESTS_PER_MINUTE`` / ``SOLOIST_LLM_TOKENS_PER_MINUTE`` set, if any."""
    raw = {name: os.environ.get(env, "").strip() for name, env in (("requests", ENV_RPM), ("tokens", ENV_TPM))}
    if not any(raw.values()):
        return None
    values: dict[str, int | None] = {}
    for name, text in raw.items():
        values[name] = None
        if not text:
            continue
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            env = ENV_RPM if name == "requests" else ENV_TPM
            raise LlmConfigError(f"LLM configuration: {env} must be a positive integer, got {text!r}")
        values[name] = value
    return budget_of(window_s=60.0, **values)


class LlmConfig(BaseModel):
    """Where and how to call the model. ``api_key`` never appears in reprs or logs."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    model: str
    api_key: SecretStr | None = None
    timeout: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0)
    backoff: float = Field(0.5, ge=0)
    """First retry delay in seconds; doubled on every further attempt."""
    max_backoff: float = Field(30.0, ge=0)
    shared: bool = True
    """Whether calls hold a permit of the endpoint's shared scope (False: only their run's cap)."""
    scope: str | None = None
    """The shared scope's name (None: derived from base URL and model, see ``endpoint_scope``)."""
    budget: Budget | None = None
    """Requests and tokens per window for the whole endpoint, across the cluster (None: the cap alone)."""
    reserve_output_tokens: int = Field(256, ge=0)
    """Output tokens a request without ``max_tokens`` reserves from the budget."""

    def endpoint(self) -> ModelEndpoint | None:
        """The shared scope calls to this endpoint hold (None when ``shared`` is off)."""
        if not self.shared:
            return None
        return ModelEndpoint.of(self.base_url, self.model, scope=self.scope, budget=self.budget)

    @classmethod
    def from_env(cls, *, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 **options: Any) -> "LlmConfig":
        """Arguments first, then ``SOLOIST_LLM_BASE_URL``, ``SOLOIST_LLM_MODEL``, ``OPENAI_API_KEY``
        (and, for a budget not given, ``SOLOIST_LLM_REQUESTS_PER_MINUTE``/``SOLOIST_LLM_TOKENS_PER_MINUTE``)."""
        if "budget" not in options:
            options["budget"] = _env_budget()
        base_url = base_url or os.environ.get(ENV_BASE_URL)
        model = model or os.environ.get(ENV_MODEL)
        api_key = api_key or os.environ.get(ENV_API_KEY)
        missing = [f"{what} (pass {arg}=... or set {env})" for what, arg, env, value in (
            ("the endpoint's base URL", "base_url", ENV_BASE_URL, base_url),
            ("the model name", "model", ENV_MODEL, model)) if not value]
        if missing:
            raise LlmConfigError("LLM configuration: missing " + "; ".join(missing))
        if not str(base_url).startswith(("http://", "https://")):
            raise LlmConfigError(f"LLM configuration: base_url must be http:// or https://, got {base_url!r}")
        return cls(base_url=str(base_url).rstrip("/"), model=str(model), api_key=api_key, **options)


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ToolSpec(BaseModel):
    """A tool the model may call (sent as an OpenAI ``function`` tool)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ChatInput(BaseModel):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpec] = Field(default_factory=list)
    temperature: float | None = None
    max_tokens: int | None = None


class ToolCallRequest(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatOutput(BaseModel):
    """The model's answer, its usage, and how many attempts (and which delays) it took."""

    content: str = ""
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None
    attempts: int = 1
    retry_delays: list[float] = Field(default_factory=list)


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_delay(headers: Any) -> float | None:
    """The delay a response asks for: ``retry-after-ms`` (as the SDK reads it), then ``Retry-After``."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    return _retry_after(headers.get("retry-after"))


#: The delays slept by the SDK's retries of the current ``chat`` call (one list per call: the
#: SDK retries inside the awaiting task, so a context variable keeps concurrent calls apart).
_DELAYS: ContextVar[list[float] | None] = ContextVar("soloist_llm_retry_delays", default=None)


@functools.cache
def _client_class() -> type[Any]:
    """``openai.AsyncOpenAI`` whose delay between attempts is soloist's, and recorded.

    The SDK decides what to retry and how often (``max_retries``); ``_calculate_retry_timeout``
    is the SDK's one hook for the delay (the same signature from openai 1.x on).
    """
    import openai

    class AsyncOpenAI(openai.AsyncOpenAI):  # the name servers see in User-Agent
        soloist_backoff: tuple[float, float] = (0.5, 30.0)  # (first delay, largest delay), from LlmConfig

        def _calculate_retry_timeout(self, remaining_retries: int, options: Any, response_headers: Any = None) -> float:
            first, largest = self.soloist_backoff
            hint = _server_delay(response_headers)
            delays = _DELAYS.get()
            retries_before = len(delays) if delays is not None else max(0, self.max_retries - remaining_retries)
            delay = min(largest, hint if hint is not None else first * 2 ** retries_before)
            if delays is not None:
                delays.append(delay)
            return delay

    return AsyncOpenAI


def _client(config: LlmConfig) -> Any:
    """An SDK client for ``config``; the key is the config's alone (never the process's environment)."""
    key = config.api_key.get_secret_value() if config.api_key is not None else ""
    # without a key the SDK would read the process's OPENAI_API_KEY: a placeholder, never sent (see chat)
    client = _client_class()(base_url=config.base_url, api_key=key or "no-key", timeout=config.timeout,
                             max_retries=config.max_retries)
    client.soloist_backoff = (config.backoff, config.max_backoff)
    return client


def _body(config: LlmConfig, inp: ChatInput) -> dict[str, Any]:
    body: dict[str, Any] = {"model": config.model, "messages": [m.model_dump(exclude_none=True) for m in inp.messages]}
    if inp.tools:
        body["tools"] = [{"type": "function", "function": t.model_dump()} for t in inp.tools]
    if inp.temperature is not None:
        body["temperature"] = inp.temperature
    if inp.max_tokens is not None:
        body["max_tokens"] = inp.max_tokens
    return body


def _parse(data: Any) -> ChatOutput:
    try:
        choice = data["choices"][0]
        message = choice["message"]
        calls = []
        for raw in message.get("tool_calls") or []:
            fn = raw["function"]
            args = fn.get("arguments") or "{}"
            calls.append(ToolCallRequest(id=raw["id"], name=fn["name"], arguments=json.loads(args) if isinstance(args, str) else args))
        return ChatOutput(content=message.get("content") or "", tool_calls=calls, usage=Usage(**(data.get("usage") or {})),
                          model=data.get("model", ""), finish_reason=choice.get("finish_reason"))
    except (KeyError, IndexError, TypeError, ValueError, ValidationError) as exc:
        raise LlmBadResponse(f"the endpoint's answer is not a chat completion ({type(exc).__name__}: {exc}): {str(data)[:300]}") from None


async def chat(config: LlmConfig, inp: ChatInput) -> ChatOutput:
    """One chat completion through the ``openai`` SDK; raises an ``LlmError`` naming what failed."""
    import openai

    url = f"{config.base_url}/chat/completions"
    delays: list[float] = []
    token = _DELAYS.set(delays)
    try:
        async with _client(config) as client:
            # no key: no Authorization header at all (a local server needs none)
            headers = {} if config.api_key is not None else {"Authorization": openai.Omit()}
            raw = await client.chat.completions.with_raw_response.create(**_body(config, inp), extra_headers=headers)
            response = raw.http_response
    except openai.APITimeoutError:
        raise LlmTimeout(f"{url} did not answer within {config.timeout}s ({len(delays) + 1} attempt(s))") from None
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc
        raise LlmUnavailable(f"{url} is unreachable ({type(cause).__name__}: {cause}; {len(delays) + 1} attempt(s)); "
                             f"check that the server runs there, or give another base URL (base_url=..., --base-url "
                             f"or {ENV_BASE_URL})") from None
    except openai.APIStatusError as exc:
        raise _status_error(config, url, exc.status_code, exc.response.text, len(delays) + 1) from None
    finally:
        _DELAYS.reset(token)
    try:
        data = response.json()
    except ValueError:
        raise LlmBadResponse(f"{url} answered {response.status_code} with non-JSON: {response.text[:300]}") from None
    return _parse(data).model_copy(update={"attempts": len(delays) + 1, "retry_delays": delays})


def estimate_tokens(config: LlmConfig, inp: ChatInput) -> int:
    """What a request reserves from its endpoint's budget before it is sent: its text (the
    messages and the tools' schemas) at three characters a token, which no tokenizer of
    natural text undercuts, plus its ``max_tokens`` (else ``config.reserve_output_tokens``)."""
    chars = sum(len(m.content or "") + len(json.dumps(m.tool_calls or [])) for m in inp.messages)
    chars += sum(len(json.dumps(t.model_dump())) for t in inp.tools)
    output = inp.max_tokens if inp.max_tokens is not None else config.reserve_output_tokens
    return -(-chars // 3) + output


async def metered_chat(config: LlmConfig, inp: ChatInput) -> ChatOutput:
    """``chat`` under the endpoint's shared scope (a permit, and room in its budget), its usage
    reported (``report_usage``: metrics, and the handoff that runs it)."""
    endpoint = config.endpoint()
    if endpoint is None:
        try:
            out = await chat(config, inp)
        except LlmError:
            report_usage(TokenUsage(model=config.model), outcome="error")
            raise
        report_usage(TokenUsage(model=config.model, input_tokens=out.usage.prompt_tokens,
                                output_tokens=out.usage.completion_tokens))
        return out
    async with endpoint.call(estimate_tokens=estimate_tokens(config, inp)) as call:
        out = await chat(config, inp)
        call.report(input_tokens=out.usage.prompt_tokens, output_tokens=out.usage.completion_tokens)
    return out


def _status_error(config: LlmConfig, url: str, status: int, text: str, attempts: int) -> LlmError:
    """The error for a status the SDK gave up on: retried ones are unavailability, others a refusal."""
    if status in (408, 409, 429) or status >= 500:
        return LlmUnavailable(f"{url} answered {status} on all {attempts} attempt(s): {text[:300]}")
    hint = ""
    if status in (401, 403):
        hint = (f"; check the API key in {ENV_API_KEY} (or api_key=...)" if config.api_key is not None
                else f"; no API key was sent: set {ENV_API_KEY} (or pass api_key=...)")
    elif status == 404:
        hint = (f"; check the model name {config.model!r} ({ENV_MODEL} or --model) and the base URL "
                f"({ENV_BASE_URL} or --base-url; OpenAI-compatible servers usually serve under /v1)")
    return LlmRequestRejected(f"{url} refused the request with {status}: {text[:300]}{hint}")


def tool_call_transitions(output: ChatOutput, batch: TransitionBatch | None = None) -> TransitionBatch:
    """The assistant message (with its usage) and one ``execute_tool`` per tool call the model made.

    The model's call ids become the pending calls' ids, so the ``tool_result``s answer them.
    """
    batch = batch if batch is not None else TransitionBatch()
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in output.tool_calls]
    batch.add_message({"role": "assistant", "content": output.content,
                       "metadata": {"tool_calls": calls, "usage": output.usage.model_dump(), "model": output.model}})
    for call in output.tool_calls:
        batch.execute_tool(call.name, call.arguments, call_id=call.id)
    return batch


class ClassifyInput(BaseModel):
    task: str = Field(min_length=1)


class SummariseInput(BaseModel):
    task: str
    summary: dict[str, Any]


_CLASSIFY_PROMPT = (
    "You classify code-search tasks. Answer with one JSON object and nothing else: "
    '{"type": one of ' + ", ".join(TASK_TYPES) + ', "complexity": "simple" | "moderate" | "complex", '
    '"keywords": [at most 8 identifiers or words to grep for, best first]}'
)
_SUMMARY_PROMPT = ("You summarise the findings of a code exploration for the user's task in at most 120 words. "
                   "Cite locations as path:line. Use only the findings given.")


def _json_object(text: str) -> dict[str, Any]:
    match = re.search(r"\{.*\}", text, re.S)
    if match is None:
        raise ValueError("no JSON object in the answer")
    value = json.loads(match.group(0))
    if not isinstance(value, dict):
        raise ValueError("the answer is not a JSON object")
    return value


def _classification(text: str) -> dict[str, Any]:
    value = _json_object(text)
    kind, complexity, keywords = value.get("type"), value.get("complexity"), value.get("keywords")
    problems = []
    if kind not in TASK_TYPES:
        problems.append(f"type {kind!r} is not one of {', '.join(TASK_TYPES)}")
    if complexity not in ("simple", "moderate", "complex"):
        problems.append(f"complexity {complexity!r} is not simple, moderate or complex")
    if not isinstance(keywords, list) or not all(isinstance(k, str) and k.strip() for k in keywords):
        problems.append("keywords is not a list of non-empty strings")
    if problems:
        raise ValueError("; ".join(problems))
    assert isinstance(keywords, list)  # checked above: a problem otherwise
    return {"type": kind, "complexity": complexity, "keywords": [k.strip() for k in keywords][:8]}


class LlmCaller:
    """A ``ToolCaller`` serving ``{prefix}chat``, ``{prefix}classify`` and ``{prefix}summarise``.

    Endpoint failures (after retries) raise ``LlmError`` (a failed caller); input that does
    not validate, or a model answer that cannot be used, is a tool error (``is_error``).
    """

    def __init__(self, config: LlmConfig | None = None, *, prefix: str = "llm.", replicas: int = 1, **env: Any) -> None:
        self.config = config if config is not None else LlmConfig.from_env(**env)
        self.prefix = prefix
        self._replicas = replicas
        self.pool_key = f"llm-{uuid.uuid4().hex[:12]}"

    @property
    def label(self) -> str:
        return f"LLM {self.config.model!r} at {self.config.base_url}"

    def names(self) -> list[str]:
        return [self.prefix + t for t in ("chat", "classify", "summarise")]

    def owns(self, name: str) -> bool:
        return name in self.names()

    def pool_options(self, name: str) -> tuple[int, float]:
        return self._replicas, 0.0

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        tool = name[len(self.prefix):] if name.startswith(self.prefix) else None
        try:
            if tool == "chat":
                return ToolCallResult.of_json(await metered_chat(self.config, ChatInput.model_validate(arguments)))
            if tool == "classify":
                return await self._classify(ClassifyInput.model_validate(arguments))
            if tool == "summarise":
                return await self._summarise(SummariseInput.model_validate(arguments))
        except ValidationError as exc:
            return ToolCallResult.error(f"invalid input for {name!r}: {exc}")
        return ToolCallResult.error(f"unknown LLM tool {name!r}; tools: {', '.join(self.names())}")

    async def _classify(self, inp: ClassifyInput) -> ToolCallResult:
        out = await metered_chat(self.config, ChatInput(messages=[ChatMessage(role="system", content=_CLASSIFY_PROMPT),
                                                          ChatMessage(role="user", content=inp.task)], temperature=0))
        try:
            task = _classification(out.content)
        except ValueError as exc:
            return ToolCallResult.error(f"the model's classification is not usable ({exc}): {out.content[:200]!r}")
        return ToolCallResult.of_json({**task, "usage": out.usage.model_dump(), "model": out.model})

    async def _summarise(self, inp: SummariseInput) -> ToolCallResult:
        findings = json.dumps({k: inp.summary.get(k) for k in ("headline", "definitions", "references", "imports")})[:8000]
        out = await metered_chat(self.config, ChatInput(messages=[
            ChatMessage(role="system", content=_SUMMARY_PROMPT),
            ChatMessage(role="user", content=f"Task: {inp.task}\nFindings (JSON): {findings}")], temperature=0))
        if not out.content.strip():
            return ToolCallResult.error("the model answered an empty summary")
        return ToolCallResult.of_json({"text": out.content.strip(), "usage": out.usage.model_dump(), "model": out.model})
