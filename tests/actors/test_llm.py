"""The LLM subagent against a local chat-completions server started by the test."""

from __future__ import annotations

import json
import socket

import pytest

from actors import (
    ChatInput,
    ChatOutput,
    LlmCaller,
    LlmConfig,
    LlmConfigError,
    LlmRequestRejected,
    LlmTimeout,
    LlmUnavailable,
    chat,
    tool_call_transitions,
)
from coordinators import AgentState, reduce
from tests._waits import eventually
from tests.actors.servers.chat_server import ChatServer, Reply, completion

HELLO = {"messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


def config(server: ChatServer, **options) -> LlmConfig:
    return LlmConfig.from_env(base_url=server.base_url, model="test-model", api_key="sk-test", **options)


async def test_a_completion_sends_model_key_and_messages_and_records_usage(server):
    server.replies.append(Reply(body=completion("hi there", usage=(12, 3))))
    out = await chat(config(server), ChatInput.model_validate({**HELLO, "temperature": 0.2, "max_tokens": 50}))
    assert out.content == "hi there" and out.finish_reason == "stop" and out.attempts == 1
    assert out.usage.model_dump() == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == "Bearer sk-test"
    assert request["headers"]["content-type"] == "application/json"
    assert request["headers"]["user-agent"].startswith("AsyncOpenAI/Python")  # the official SDK carries it
    assert request["body"] == {"model": "test-model", "messages": [{"role": "user", "content": "hello"}],
                               "temperature": 0.2, "max_tokens": 50}


async def test_a_429_is_retried_after_the_retry_after_delay_then_succeeds(server):
    server.replies += [Reply(429, {"error": "slow down"}, headers={"Retry-After": "0.05"}), Reply(body=completion("ok"))]
    out = await chat(config(server, backoff=5.0), ChatInput.model_validate(HELLO))
    assert out.content == "ok" and out.attempts == 2
    assert out.retry_delays == [0.05]  # Retry-After, not the 5 s backoff
    assert len(server.requests) == 2 and server.requests[0]["body"] == server.requests[1]["body"]


async def test_500s_back_off_exponentially_and_fail_when_retries_are_exhausted(server):
    server.replies += [Reply(500, {"error": "boom"}) for _ in range(3)]
    with pytest.raises(LlmUnavailable, match=r"answered 500 on all 3 attempt\(s\)"):
        await chat(config(server, max_retries=2, backoff=0.01), ChatInput.model_validate(HELLO))
    assert len(server.requests) == 3


async def test_a_client_error_is_not_retried(server):
    server.replies += [Reply(401, {"error": "bad key"}), Reply(body=completion("never"))]
    with pytest.raises(LlmRequestRejected, match="refused the request with 401.*bad key"):
        await chat(config(server), ChatInput.model_validate(HELLO))
    assert len(server.requests) == 1


async def test_a_refused_key_names_the_variable_that_holds_it(server):
    server.replies.append(Reply(401, {"error": "invalid api key"}))
    with pytest.raises(LlmRequestRejected, match=r"refused the request with 401.*invalid api key.*check the API key in OPENAI_API_KEY"):
        await chat(config(server), ChatInput.model_validate(HELLO))


async def test_without_a_key_no_authorization_is_sent_and_a_refusal_says_to_set_one(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-of-the-process")  # read only by LlmConfig.from_env, never by the transport
    keyless = LlmConfig(base_url=server.base_url, model="test-model")
    server.replies += [Reply(body=completion("local")), Reply(401, {"error": "key required"})]
    assert (await chat(keyless, ChatInput.model_validate(HELLO))).content == "local"
    assert "authorization" not in server.requests[0]["headers"]
    with pytest.raises(LlmRequestRejected, match=r"no API key was sent: set OPENAI_API_KEY"):
        await chat(keyless, ChatInput.model_validate(HELLO))


async def test_an_unknown_model_names_the_model_and_where_it_came_from(server):
    server.replies.append(Reply(404, {"error": "model 'test-model' not found"}))
    with pytest.raises(LlmRequestRejected, match=r"404.*not found.*check the model name 'test-model' \(SOLOIST_LLM_MODEL"):
        await chat(config(server), ChatInput.model_validate(HELLO))


async def test_an_endpoint_that_is_down_is_named_in_the_error():
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = LlmConfig.from_env(base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key="k", max_retries=1, backoff=0)
    with pytest.raises(LlmUnavailable, match=rf"http://127.0.0.1:{port}/v1/chat/completions is unreachable .*2 attempt\(s\)"):
        await chat(down, ChatInput.model_validate(HELLO))


async def test_an_endpoint_that_never_answers_times_out_on_every_attempt(server):
    server.replies += [Reply(hang=True), Reply(hang=True)]
    # 2 s: long enough for each request to reach the server on a busy machine, so both are seen.
    with pytest.raises(LlmTimeout, match=r"did not answer within 2.0s \(2 attempt\(s\)\)"):
        await chat(config(server, timeout=2.0, max_retries=1, backoff=0), ChatInput.model_validate(HELLO))

    async def recorded() -> int:  # the server's handler thread records a request as it reads it
        return len(server.requests)

    assert await eventually(recorded, lambda n: n >= 2, "both attempts recorded by the server") == 2


async def test_the_models_tool_calls_become_execute_tool_transitions(server):
    calls = [{"id": "call_1", "name": "search_code", "arguments": {"pattern": "connect"}},
             {"id": "call_2", "name": "list_tree", "arguments": {}}]
    server.replies.append(Reply(body=completion("", tool_calls=calls)))
    tools = [{"name": "search_code", "description": "grep", "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}}]
    out = await chat(config(server), ChatInput.model_validate({**HELLO, "tools": tools}))
    assert server.requests[0]["body"]["tools"] == [{"type": "function", "function": tools[0]}]
    assert [(c.id, c.name, c.arguments) for c in out.tool_calls] == [(c["id"], c["name"], c["arguments"]) for c in calls]
    batch = tool_call_transitions(out)
    assert [t.transition_type.value for t in batch] == ["add_message", "execute_tool", "execute_tool"]
    state = reduce(AgentState(), batch)
    assert {k: (p.tool_name, dict(p.arguments)) for k, p in state.pending_tool_calls.items()} == {
        "call_1": ("search_code", {"pattern": "connect"}), "call_2": ("list_tree", {})}
    assert state.messages[0].metadata["usage"]["total_tokens"] == 18


async def test_the_caller_serves_chat_classify_and_summarise_as_tools(server):
    server.replies += [
        Reply(body=completion("hello")),
        Reply(body=completion('Sure: {"type": "locate_definition", "complexity": "simple", "keywords": ["connect"]}')),
        Reply(body=completion("`connect` is defined at cluster/connect.py:12.")),
        Reply(body=completion('{"type": "astrology", "complexity": "simple", "keywords": []}')),
    ]
    caller = LlmCaller(config(server))
    assert caller.names() == ["llm.chat", "llm.classify", "llm.summarise"]
    chatted = ChatOutput.model_validate_json((await caller.call_tool("llm.chat", HELLO)).text)
    assert chatted.content == "hello" and chatted.usage.total_tokens == 18
    task = json.loads((await caller.call_tool("llm.classify", {"task": "where is `connect` defined?"})).text)
    assert task["type"] == "locate_definition" and task["keywords"] == ["connect"] and task["usage"]["total_tokens"] == 18
    assert server.requests[1]["body"]["messages"][1] == {"role": "user", "content": "where is `connect` defined?"}
    summary = json.loads((await caller.call_tool("llm.summarise", {"task": "t", "summary": {"headline": ["x"]}})).text)
    assert summary["text"].startswith("`connect` is defined")
    unusable = await caller.call_tool("llm.classify", {"task": "t"})
    assert unusable.is_error and "type 'astrology' is not one of" in unusable.text
    bad = await caller.call_tool("llm.chat", {"messages": []})
    assert bad.is_error and "invalid input for 'llm.chat'" in bad.text


def test_configuration_comes_from_arguments_then_the_environment(monkeypatch):
    monkeypatch.setenv("SOLOIST_LLM_BASE_URL", "http://env:1/v1/")
    monkeypatch.setenv("SOLOIST_LLM_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    cfg = LlmConfig.from_env(model="arg-model")
    assert (cfg.base_url, cfg.model, cfg.api_key.get_secret_value()) == ("http://env:1/v1", "arg-model", "sk-env")
    assert "sk-env" not in repr(cfg)
    monkeypatch.delenv("SOLOIST_LLM_BASE_URL")
    monkeypatch.delenv("SOLOIST_LLM_MODEL")
    with pytest.raises(LlmConfigError, match="base URL .*SOLOIST_LLM_BASE_URL.*the model name .*SOLOIST_LLM_MODEL"):
        LlmConfig.from_env()
