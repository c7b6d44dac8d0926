"""The LLM subagent inside the cluster: a handoff to it, and ``soloist run --provider`` end to end."""

from __future__ import annotations


import pytest

from actors import Call, CallerFailed, Orchestrator, handoff
from actors import ChatOutput, LlmCaller, LlmConfig, LlmUnavailable
from cluster.cli import build_parser
from cluster.cli import explore
from coordinators import AgentState
from tests.actors.servers.chat_server import ChatServer, Reply, completion

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


async def test_the_llm_runs_as_a_subagent_through_handoff_and_records_usage(server):
    server.replies += [Reply(503, {"error": "busy"}, headers={"Retry-After": "0"}), Reply(body=completion("hi", usage=(5, 2)))]
    orch = Orchestrator(AgentState(), caller=LlmCaller(LlmConfig.from_env(base_url=server.base_url, model="m", api_key="k")))
    try:
        out = await handoff(orch, Call("llm.chat", {"messages": [{"role": "user", "content": "hello"}]}), ChatOutput)
        assert (out.content, out.attempts, out.usage.total_tokens) == ("hi", 2, 7)
        server.replies += [Reply(500, {"error": "down"}) for _ in range(4)]
        with pytest.raises(CallerFailed, match="LlmUnavailable: .*answered 500 on all 4 attempt") as info:
            await handoff(orch, Call("llm.chat", {"messages": [{"role": "user", "content": "again"}]}), ChatOutput)
        assert isinstance(info.value.__cause__, LlmUnavailable)
    finally:
        await orch.close()
    assert [r["body"]["model"] for r in server.requests] == ["m"] * 6


async def test_a_run_with_a_provider_lets_the_model_classify_and_narrate(server, tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "net.py").write_text("def connect(address):\n    return address\n")
    (tmp_path / "pkg" / "app.py").write_text("from pkg.net import connect\n\nconnect('x')\n")
    server.replies += [
        Reply(body=completion('{"type": "locate_definition", "complexity": "simple", "keywords": ["connect"]}')),
        Reply(body=completion("connect is defined at pkg/net.py:1 and called from pkg/app.py:3.")),
    ]
    llm = LlmConfig.from_env(base_url=server.base_url, model="local-model", api_key="k")
    run = await explore("which file defines the dialer? `connect`", tmp_path, llm=llm, max_turns=40)
    assert run.outcome.status == "complete", run.outcome.reason
    task, summary = run.outcome.state["task"], run.outcome.state["summary"]
    assert task["classified_by"] == "llm" and task["type"] == "locate_definition" and task["keywords"][0] == "connect"
    assert task["usage"]["total_tokens"] == 18
    assert summary["narrative"].startswith("connect is defined at pkg/net.py:1")
    assert any(d["ref"] == "pkg/net.py:1" for d in summary["definitions"])
    assert len(server.requests) == 2
    assert server.requests[0]["body"]["messages"][-1]["content"] == "which file defines the dialer? `connect`"
    assert "pkg/net.py" in server.requests[1]["body"]["messages"][-1]["content"]


def test_the_command_line_takes_a_provider_base_url_and_model():
    args = build_parser().parse_args(["run", "task", "--provider", "openai-compatible", "--base-url", "http://h:1/v1", "--model", "m"])
    assert (args.provider, args.base_url, args.model) == ("openai-compatible", "http://h:1/v1", "m")
    assert build_parser().parse_args(["run", "task"]).provider == "offline"


def test_the_command_line_refuses_a_provider_without_an_endpoint(monkeypatch, capsys):
    from cluster.cli import main

    for var in ("SOLOIST_LLM_BASE_URL", "SOLOIST_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    assert main(["run", "where is connect?", "--provider", "openai-compatible"]) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "missing the endpoint's base URL (pass base_url=... or set SOLOIST_LLM_BASE_URL)" in err
