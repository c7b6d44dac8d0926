"""The coordination coordinator: which stage the run is in, whether to go on, who runs next.

Stages only move forward (``exploring`` -> ``reading`` -> ``summarising`` -> ``complete``):

* no ``task`` yet                           -> hand off to classification;
* calls still pending (not yet executed)    -> hand off to safety (the run loop executes
  pending calls once safety has seen them);
* exploration has results to digest or calls to plan -> ``exploring`` while keyword
  searches are outstanding, ``reading`` after; hand off to exploration;
* nothing left                              -> ``summarising``; on its next turn it writes
  ``summary`` and enters ``complete`` with ``should_continue=False``.
"""

from __future__ import annotations

from typing import Any

from coordinators import ContextSnapshot, CoordinatorResult, TransitionBatch
from coordinators.builtin._common import TRAIL_LIMIT, append_trail, read_state, stage_rank
from coordinators.builtin.exploration import survey

__all__ = ["CoordinationCoordinator", "build_summary", "MAX_SUMMARY_REFERENCES"]

MAX_SUMMARY_REFERENCES = 20
MAX_SUMMARY_EDGES = 30


def _ref(path: str, line: Any) -> str:
    return f"{path}:{line}"


def build_summary(snapshot: ContextSnapshot, trail: list[dict[str, Any]]) -> dict[str, Any]:
    """The final report: definitions (path:line), references, import edges, the trail."""
    task = read_state(snapshot, "task", {})
    findings = read_state(snapshot, "findings", [])
    definitions = [
        {"symbol": f["via"], "kind": f["symbol_kind"], "path": f["path"], "line": f["line"],
         "ref": _ref(f["path"], f["line"]), "text": f["text"]}
        for f in findings if f.get("symbol_kind")
    ]
    references = [
        {"symbol": f["via"], "path": f["path"], "line": f["line"], "ref": _ref(f["path"], f["line"]),
         "text": f["text"]}
        for f in findings if not f.get("symbol_kind")
    ][:MAX_SUMMARY_REFERENCES]
    edges = read_state(snapshot, "imports", [])
    involved = {f["path"] for f in findings}
    among = [e for e in edges if e["path"] in involved and e.get("imported_path") in involved]
    chosen = among or edges
    imports = [
        {"importer": e["importer"], "imported": e["imported"], "path": e["path"], "line": e["line"],
         "imported_path": e.get("imported_path"), "ref": _ref(e["path"], e["line"])}
        for e in chosen[:MAX_SUMMARY_EDGES]
    ]
    excerpts = [
        {"path": e["path"], "start_line": e["start_line"], "end_line": e["end_line"]}
        for e in read_state(snapshot, "excerpts", [])
    ]
    headline = [f"{d['symbol']} ({d['kind']}) defined at {d['ref']}" for d in definitions]
    headline += [f"{e['importer']} imports {e['imported']} at {e['ref']}" for e in imports[:5]]
    if not headline:
        headline = ["no definitions found" if findings else "nothing matched the task's keywords"]
    return {
        "task": task.get("message", ""),
        "task_type": task.get("type", "general"),
        "keywords": task.get("keywords", []),
        "headline": headline,
        "definitions": definitions,
        "references": references,
        "imports": imports,
        "excerpts": excerpts,
        "blocked": read_state(snapshot, "blocked", []),
        "calls_made": len(read_state(snapshot, "calls_made", [])),
        "trail": trail,
    }


class CoordinationCoordinator:
    """Decides the stage, whether to continue, and which coordinator goes next."""

    name = "coordination"

    async def process(self, snapshot: ContextSnapshot, message: Any) -> CoordinatorResult:
        """Route the run; at ``summarising`` write ``summary`` and complete it."""
        stage = snapshot.conversation_stage
        batch = TransitionBatch()
        if stage == "complete":
            return self._finish(batch, snapshot, "run already complete", stop=True)
        if stage == "summarising":
            reasoning = "summary written; run complete"
            trail = read_state(snapshot, "trail", [])
            trail = (trail + [{"coordinator": self.name, "reasoning": reasoning}])[-TRAIL_LIMIT:]
            batch.update_state("summary", build_summary(snapshot, trail))
            batch.update_stage("complete")
            return self._finish(batch, snapshot, reasoning, stop=True)
        if snapshot.get_state("task") is None:
            return self._finish(batch, snapshot, "task not classified yet", handoff="classification")
        if snapshot.pending_tool_calls:
            count = len(snapshot.pending_tool_calls)
            return self._finish(
                batch, snapshot, f"{count} call(s) still pending: safety checks them before they run",
                handoff="safety",
            )
        work = survey(snapshot)
        if work.digested_now or work.new_calls:
            target = "reading" if work.searches_settled else "exploring"
            target = max(target, stage, key=stage_rank)
            self._move(batch, stage, target)
            what = []
            if work.digested_now:
                what.append(f"{work.digested_now} result(s) to digest")
            if work.new_calls:
                what.append(f"{len(work.new_calls)} call(s) to plan")
            return self._finish(batch, snapshot, f"{target}: {', '.join(what)}", handoff="exploration")
        self._move(batch, stage, "summarising")
        findings = len(read_state(snapshot, "findings", []))
        return self._finish(
            batch, snapshot, f"nothing left to explore ({findings} finding(s)): summarising",
            handoff=self.name,
        )

    @staticmethod
    def _move(batch: TransitionBatch, current: str, target: str) -> None:
        """Enter ``target`` unless the run is already there (stages never go back)."""
        if stage_rank(target) > stage_rank(current):
            batch.update_stage(target)

    def _finish(
        self,
        batch: TransitionBatch,
        snapshot: ContextSnapshot,
        reasoning: str,
        *,
        handoff: str | None = None,
        stop: bool = False,
    ) -> CoordinatorResult:
        append_trail(batch, snapshot, self.name, reasoning)
        return CoordinatorResult(
            transitions=batch, reasoning=reasoning, should_continue=not stop, handoff_to=handoff
        )
