"""Tool outcomes other than a value are journalled steps too: a retry asked by a tool and a
call that waits for approval are answered from the journal when a run is taken up again,
and an approved call runs its body once (counted by the tools' own ledger lines)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import DeferredToolRequests, DeferredToolResults

from actors.pydantic_ai import SoloistAgent
from tests.pydantic_ai._agents import build_approval_agent, ledger_lines

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


async def test_a_retry_and_an_approval_request_replay_without_running_a_body_again(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.log"
    durable = SoloistAgent(build_approval_agent(ledger), store=str(tmp_path / "runs.sqlite"))

    first = await durable.run("go", deps=str(ledger), run_id="ask")
    assert isinstance(first.output, DeferredToolRequests)
    assert [call.tool_name for call in first.output.approvals] == ["publish"]
    assert ledger_lines(ledger) == ["model 0", "tool flaky 0", "model 1", "tool flaky 1", "model 2"]

    # Taken up again: the retry the tool asked for and its second return come from the journal.
    again = await durable.run("go", deps=str(ledger), run_id="ask")
    assert isinstance(again.output, DeferredToolRequests) and again.output.approvals == first.output.approvals
    assert len(ledger_lines(ledger)) == 5, "a committed request or tool body ran again"

    # The person approves; a new agent run continues the conversation and publishes once.
    approvals = DeferredToolResults(approvals={call.tool_call_id: True for call in first.output.approvals})
    done = await durable.run(deps=str(ledger), run_id="answer", message_history=first.all_messages(),
                             deferred_tool_results=approvals)
    assert done.output == "done: flaky=try again; flaky=flaky ok 1; publish=published post"
    assert ledger_lines(ledger)[5:] == ["tool publish post", "model 3"]
    replayed = await durable.run(deps=str(ledger), run_id="answer", message_history=first.all_messages(),
                                 deferred_tool_results=approvals)
    assert replayed.output == done.output
    assert ledger_lines(ledger).count("tool publish post") == 1, "the approved side effect ran twice"
