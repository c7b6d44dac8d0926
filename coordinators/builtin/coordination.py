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
from coordinators.builtin.classification import GENERAL_TASK
from coordinators.builtin.exploration import survey

__all__ = ["CoordinationCoordinator", "build_summary", "MAX_SUMMARY_REFERENCES"]

MAX_SUMMARY_REFERENCES = 20
MAX_SUMMARY_EDGES = 30
HEADLINE_IMPORTERS = 8


def _ref(path: str, line: Any) -> str:
    return f"{path}:{line}"


def _top_packages(modules: list[str], limit: int = 8) -> list[list[Any]]:
    """``[[package, count], ...]``, most importers first: packages are the first two dotted parts."""
    counts: dict[str, int] = {}
    for module in modules:
        package = ".".join(module.split(".")[:2])
        counts[package] = counts.get(package, 0) + 1
    return [[p, n] for p, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]]


def _importer_answers(answers: dict[str, Any]) -> dict[str, Any]:
    """The importer sections of the summary from ``find_importers`` answers."""
    definitions, reexports, importers, counts = [], [], [], {}
    for symbol, answer in answers.items():
        if answer.get("kind") not in ("symbol", "module"):
            continue
        for d in answer.get("definitions", []):
            definitions.append({"symbol": symbol, "kind": d["kind"], "module": d["module"], "path": d["path"],
                                "line": d["line"], "ref": _ref(d["path"], d["line"]), "text": ""})
        for r in answer.get("reexports", []):
            reexports.append({"symbol": symbol, "module": r["module"], "source": r["source"], "path": r["path"],
                              "line": r["line"], "ref": _ref(r["path"], r["line"]), "public": r["public"]})
        rows = [
            {"symbol": symbol, "importer": i["importer"], "imported": i["imported"], "path": i["path"],
             "line": i["line"], "ref": _ref(i["path"], i["line"]), "how": i["how"],
             "conditional": i.get("conditional", False), "local": i.get("local", False)}
            for i in answer.get("importers", [])
        ]
        importers += rows
        counts[symbol] = {
            "kind": answer["kind"], "modules": answer.get("modules", []), "count": len(rows),
            "complete": not answer.get("truncated", False),
            "top_packages": _top_packages([r["importer"] for r in rows]),
        }
    return {"definitions": definitions, "reexports": reexports, "importers": importers, "importer_counts": counts}


def build_summary(snapshot: ContextSnapshot, trail: list[dict[str, Any]]) -> dict[str, Any]:
    """The final report: definitions (path:line), re-exports, every importer of the symbols
    asked about, references, the other import edges seen, the trail."""
    task = read_state(snapshot, "task", {})
    findings = read_state(snapshot, "findings", [])
    graph = _importer_answers(read_state(snapshot, "importers", {}))
    answered = {d["symbol"] for d in graph["definitions"]}
    exact = {(d["path"], d["line"]) for d in graph["definitions"]}
    texts = {(f["path"], f["line"]): f["text"] for f in findings}
    for d in graph["definitions"]:
        d["text"] = texts.get((d["path"], d["line"]), "")
    # A search hit that looks like a definition of a symbol the import graph answered, but is
    # not one of its module-level definitions (a method, an alias), is only a reference.
    definitions = graph["definitions"] + [
        {"symbol": f["via"], "kind": f["symbol_kind"], "path": f["path"], "line": f["line"],
         "ref": _ref(f["path"], f["line"]), "text": f["text"]}
        for f in findings if f.get("symbol_kind") and f["via"] not in answered
    ]
    references = [
        {"symbol": f["via"], "path": f["path"], "line": f["line"], "ref": _ref(f["path"], f["line"]),
         "text": f["text"]}
        for f in findings
        if not f.get("symbol_kind") or (f["via"] in answered and (f["path"], f["line"]) not in exact)
    ][:MAX_SUMMARY_REFERENCES]
    answer_edges = {(i["path"], i["line"]) for i in graph["importers"]}
    edges = [e for e in read_state(snapshot, "imports", []) if (e["path"], e["line"]) not in answer_edges]
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
    for r in graph["reexports"]:
        if r["public"]:
            headline.append(f"{r['symbol']} re-exported by {r['module']} at {r['ref']}")
    for symbol, count in graph["importer_counts"].items():
        names = [i["importer"] for i in graph["importers"] if i["symbol"] == symbol]
        shown = ", ".join(names[:HEADLINE_IMPORTERS]) + (f" (+{len(names) - HEADLINE_IMPORTERS} more)" if len(names) > HEADLINE_IMPORTERS else "")
        what = f"{symbol} or its module" if count["kind"] == "symbol" else f"module {symbol}"
        headline.append(f"{count['count']} module(s) import {what}" + (f": {shown}" if names else ""))
    if not graph["importer_counts"]:
        headline += [f"{e['importer']} imports {e['imported']} at {e['ref']}" for e in imports[:5]]
    if not headline:
        headline = ["no definitions found" if findings else "nothing matched the task's keywords"]
    return {
        "task": task.get("message", ""),
        "task_type": task.get("type", GENERAL_TASK),
        "keywords": task.get("keywords", []),
        "headline": headline,
        "definitions": definitions,
        "reexports": graph["reexports"],
        "importers": graph["importers"],
        "importer_counts": graph["importer_counts"],
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
