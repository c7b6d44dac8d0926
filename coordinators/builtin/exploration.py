"""The exploration coordinator: turns tool results into findings and plans the next calls.

Each turn it first *digests* the ``tool`` messages it has not seen (ids in
``digested_calls``) into ``files``, ``findings``, ``excerpts`` and ``imports``, then
*plans* at most `MAX_CALLS_PER_TURN` new calls in a fixed order: ``list_tree`` once;
``find_importers`` once for the keywords that look like code names (the whole import graph
of the root in one handoff: definitions, re-exports and every importer, to closure); per
keyword, best first, ``search_code`` for its definitions and its whole-word uses (a literal
search for a phrase); once every search is answered, ``read_excerpt`` of the best hits
(definitions first); and ``python_imports`` once, over the files the hits are in. A call
whose canonical key is in ``calls_made`` is never planned again. Both steps are pure functions of the snapshot (`survey`), which the
coordination coordinator reuses to know whether exploration has anything left to do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from coordinators import ContextSnapshot, CoordinatorResult, TransitionBatch
from coordinators.builtin._common import append_trail, call_key, read_state

__all__ = [
    "ExplorationCoordinator",
    "Survey",
    "survey",
    "MAX_CALLS_PER_TURN",
    "MAX_CALLS_PER_RUN",
    "MAX_EXCERPTS",
    "MAX_FINDINGS",
    "MAX_IMPORT_EDGES",
    "importer_symbols",
]

MAX_CALLS_PER_TURN = 4
MAX_CALLS_PER_RUN = 40
MAX_EXCERPTS = 4
MAX_FINDINGS = 200
MAX_IMPORT_EDGES = 200
MAX_IMPORT_FILES = 200
MAX_IMPORTER_SYMBOLS = 4
SEARCH_MAX_HITS = 50
EXCERPT_CONTEXT = 5
LARGE_FILE_BYTES = 1_000_000

#: Tools called at most once per run, whatever their arguments.
_ONCE_PER_RUN = frozenset({"list_tree", "python_imports", "find_importers"})

#: The state keys exploration owns (it writes only these, plus ``trail``).
OWNED_KEYS = (
    "files", "findings", "excerpts", "imports", "importers", "calls_made", "planned_calls", "digested_calls",
)


@dataclass
class Survey:
    """Exploration's working copy of its state after digesting, and what it would plan next.

    ``new_calls`` are ``(tool_name, arguments)`` pairs not yet in ``calls_made``;
    ``notes`` say what the digest found; ``searches_settled`` is true once every keyword
    search was made and answered (the "exploring" stage is over).
    """

    root: str
    keywords: list[str]
    state: dict[str, Any]
    digested_now: int = 0
    notes: list[str] = field(default_factory=list)
    new_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    searches_settled: bool = False
    purpose_of: dict[str, dict[str, str]] = field(default_factory=dict)  # search key -> keyword, purpose


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def importer_symbols(keywords: list[str]) -> list[str]:
    """The keywords that can name code (identifiers, dotted names), best first, at most
    `MAX_IMPORTER_SYMBOLS`: the symbols whose importers the run looks up."""
    return [k for k in keywords if _IDENTIFIER.fullmatch(k) or _DOTTED.fullmatch(k)][:MAX_IMPORTER_SYMBOLS]


def _searches(root: str, keyword: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The searches for one keyword: for an identifier, its definitions then its whole-word
    uses (case-sensitive when its spelling is distinctive); otherwise a literal search."""
    base: dict[str, Any] = {"root": root, "max_hits": SEARCH_MAX_HITS}
    if not _IDENTIFIER.fullmatch(keyword):
        return [("text", "search_code", {**base, "pattern": keyword})]
    name = re.escape(keyword)
    exact = {"case_sensitive": True} if "_" in keyword or any(c.isupper() for c in keyword[1:]) else {}
    definitions = rf"^\s*(?:async\s+def|def|class)\s+{name}\b|^{name}\s*(?::[^=]*)?=(?!=)"
    return [
        ("definitions", "search_code", {**base, "pattern": definitions, "regex": True, **exact}),
        ("uses", "search_code", {**base, "pattern": rf"\b{name}\b", "regex": True, **exact}),
    ]


def _parse(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content


def _digest_one(work: Survey, planned: dict[str, Any], output: Any) -> None:
    """Fold one successful tool output into the working state."""
    tool_name, arguments = planned["tool_name"], planned["arguments"]
    via = planned.get("keyword") or arguments.get("pattern", "")
    st = work.state
    if not isinstance(output, dict):
        work.notes.append(f"{tool_name} returned no structured output")
        return
    if tool_name == "list_tree":
        st["files"] = {e["path"]: e for e in output.get("entries", []) if isinstance(e, dict)}
        work.notes.append(f"{len(st['files'])} files listed")
    elif tool_name == "search_code":
        seen = {(f["path"], f["line"]) for f in st["findings"]}
        added = 0
        for hit in output.get("hits", []):
            if len(st["findings"]) >= MAX_FINDINGS or (hit["path"], hit["line"]) in seen:
                continue
            seen.add((hit["path"], hit["line"]))
            st["findings"].append({
                "path": hit["path"], "line": hit["line"], "text": hit.get("text", ""),
                "symbol_kind": hit.get("symbol_kind"), "via": via,
            })
            added += 1
        work.notes.append(f"{added} new hit(s) for {_brief(planned)}")
    elif tool_name == "read_excerpt":
        st["excerpts"].append({k: output.get(k) for k in ("path", "start_line", "end_line", "lines")})
        work.notes.append(f"read {output.get('path')}:{output.get('start_line')}-{output.get('end_line')}")
    elif tool_name == "find_importers":
        answers = {}
        for result in output.get("results", []):
            answers[result["symbol"]] = result
            what = "module" if result.get("kind") == "module" else "name"
            if result.get("kind") == "unknown":
                work.notes.append(f"{result['symbol']!r} is neither a module-level name nor a module here")
                continue
            state = "incomplete (a bound stopped the reading)" if result.get("truncated") else "complete"
            work.notes.append(
                f"importers of {what} {result['symbol']!r}: {len(result.get('importers', []))} module(s), "
                f"{len(result.get('reexports', []))} re-export(s), {len(result.get('definitions', []))} definition(s); "
                f"set {state} over {output.get('parsed', 0)} parsed file(s)"
            )
        st["importers"] = answers
    elif tool_name == "python_imports":
        modules: dict[str, str] = output.get("modules", {})
        involved = {f["path"] for f in st["findings"]} | {e["path"] for e in st["excerpts"]}
        edges = []
        for edge in output.get("edges", []):
            target = modules.get(edge["imported"])
            if edge["path"] in involved or target in involved:
                edges.append({**edge, "imported_path": target})
        st["imports"] = edges[:MAX_IMPORT_EDGES]
        work.notes.append(f"{len(st['imports'])} import edges touch the files involved")


def _digest(work: Survey, snapshot: ContextSnapshot) -> None:
    """Read the tool messages not digested yet into the working state."""
    st = work.state
    digested = set(st["digested_calls"])
    for message in snapshot.messages:
        call_id = message.tool_call_id
        if message.role != "tool" or not call_id or call_id in digested:
            continue
        digested.add(call_id)
        st["digested_calls"].append(call_id)
        work.digested_now += 1
        planned = st["planned_calls"].get(call_id)
        if planned is None:
            continue  # not one of ours
        output = _parse(message.content)
        if message.metadata.get("is_error"):
            why = output.get("blocked") if isinstance(output, dict) else None
            work.notes.append(f"{planned['tool_name']} {'blocked: ' + why if why else 'failed'}")
            continue
        _digest_one(work, planned, output)


def _covered(path: str, line: int, planned: dict[str, Any]) -> bool:
    for call in planned.values():
        args = call["arguments"]
        if call["tool_name"] == "read_excerpt" and args.get("path") == path:
            if abs(args.get("line", 0) - line) <= args.get("context", EXCERPT_CONTEXT):
                return True
    return False


def _readable(path: str, files: dict[str, Any]) -> bool:
    fact = files.get(path)
    if fact is None:
        return True  # unknown (tree truncated): let safety and the skill decide
    return not (fact.get("is_binary") or fact.get("escapes_root") or fact.get("size", 0) > LARGE_FILE_BYTES)


def _candidates(work: Survey, pending: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """Every call worth making now, best first (before de-duplication and caps)."""
    st, root = work.state, work.root
    found: list[tuple[str, dict[str, Any]]] = [("list_tree", {"root": root})]
    symbols = importer_symbols(work.keywords)
    if symbols:  # one handoff answers definitions, re-exports and every importer, to closure
        found.append(("find_importers", {"root": root, "symbols": symbols}))
    searches: list[tuple[str, dict[str, Any]]] = []
    for keyword in work.keywords:
        for purpose, tool_name, arguments in _searches(root, keyword):
            work.purpose_of[call_key(tool_name, arguments)] = {"keyword": keyword, "purpose": purpose}
            searches.append((tool_name, arguments))
    found += searches
    made = set(st["calls_made"])
    pending_keys = {
        call_key(c["tool_name"], c["arguments"]) for i, c in st["planned_calls"].items() if i in pending
    }
    work.searches_settled = all(
        call_key(*call) in made and call_key(*call) not in pending_keys for call in searches
    )
    if not work.searches_settled:
        return found
    order = {keyword: index for index, keyword in enumerate(work.keywords)}
    ranked = sorted(
        enumerate(st["findings"]),
        key=lambda item: ({"class": 0, "def": 1}.get(item[1]["symbol_kind"], 2),
                          order.get(item[1]["via"], len(order)), item[0]),
    )
    excerpts = sum(1 for c in st["planned_calls"].values() if c["tool_name"] == "read_excerpt")
    planned = dict(st["planned_calls"])
    for _, hit in ranked:
        if excerpts >= MAX_EXCERPTS:
            break
        if _covered(hit["path"], hit["line"], planned) or not _readable(hit["path"], st["files"]):
            continue
        args = {"root": root, "path": hit["path"], "line": hit["line"], "context": EXCERPT_CONTEXT}
        planned[f"candidate-{excerpts}"] = {"tool_name": "read_excerpt", "arguments": args}
        found.append(("read_excerpt", args))
        excerpts += 1
    python = sorted({
        f["path"] for f in st["findings"] if f["path"].endswith(".py") and _readable(f["path"], st["files"])
    })
    if python:  # follow the imports of the files involved (names resolve over the whole tree)
        found.append(("python_imports", {"root": root, "paths": python[:MAX_IMPORT_FILES]}))
    return found


def survey(snapshot: ContextSnapshot) -> Survey:
    """Digest the new tool results and list the calls exploration would plan now (pure)."""
    task = read_state(snapshot, "task", {})
    work = Survey(
        root=str(snapshot.get_state("root", "") or ""),
        keywords=[str(k) for k in task.get("keywords", [])],
        state={
            "files": read_state(snapshot, "files", {}),
            "findings": read_state(snapshot, "findings", []),
            "excerpts": read_state(snapshot, "excerpts", []),
            "imports": read_state(snapshot, "imports", []),
            "importers": read_state(snapshot, "importers", {}),
            "calls_made": read_state(snapshot, "calls_made", []),
            "planned_calls": read_state(snapshot, "planned_calls", {}),
            "digested_calls": read_state(snapshot, "digested_calls", []),
        },
    )
    _digest(work, snapshot)
    pending = set(snapshot.pending_tool_calls)
    if not work.root:
        work.notes.append("no root in state: nothing can be explored")
        return work
    made = set(work.state["calls_made"])
    budget = MAX_CALLS_PER_RUN - len(made)
    once = {key.partition("{")[0] for key in made} & _ONCE_PER_RUN
    for tool_name, arguments in _candidates(work, pending):
        key = call_key(tool_name, arguments)
        if key in made or tool_name in once or len(work.new_calls) >= min(MAX_CALLS_PER_TURN, budget):
            continue
        made.add(key)
        work.new_calls.append((tool_name, arguments))
    return work


class ExplorationCoordinator:
    """Plans the search / read / import calls and digests their results into state."""

    name = "exploration"

    async def process(self, snapshot: ContextSnapshot, message: Any) -> CoordinatorResult:
        """Digest new tool results, plan up to four new calls, hand off to safety or coordination."""
        work = survey(snapshot)
        batch = TransitionBatch()
        for tool_name, arguments in work.new_calls:
            batch.execute_tool(tool_name, arguments)
            call_id = batch.transitions[-1].data["call_id"]
            key = call_key(tool_name, arguments)
            entry = {"tool_name": tool_name, "arguments": arguments}
            entry.update(work.purpose_of.get(key, {}))
            work.state["planned_calls"][call_id] = entry
            work.state["calls_made"].append(key)
        if work.new_calls or work.digested_now:
            for key in OWNED_KEYS:
                batch.update_state(key, work.state[key])
        digest = "; ".join(work.notes)
        if work.new_calls:
            planned = ", ".join(
                _brief({"tool_name": name, "arguments": args, **work.purpose_of.get(call_key(name, args), {})})
                for name, args in work.new_calls
            )
            reasoning = f"planned {len(work.new_calls)} call(s): {planned}"
            handoff = "safety"
        else:
            reasoning = "nothing new to explore"
            handoff = "coordination"
        if digest:
            reasoning = f"{digest}; {reasoning}"
        append_trail(batch, snapshot, self.name, reasoning)
        return CoordinatorResult(transitions=batch, reasoning=reasoning, handoff_to=handoff)


def _brief(planned: dict[str, Any]) -> str:
    """A call as the reasoning trail shows it, e.g. ``search_code(definitions of 'Widget')``."""
    arguments = planned["arguments"]
    if "keyword" in planned:
        what = f"{planned['purpose']} of {planned['keyword']!r}"
    elif "pattern" in arguments:
        what = repr(arguments["pattern"])
    elif "symbols" in arguments:
        what = ", ".join(map(repr, arguments["symbols"]))
    elif "path" in arguments:
        what = f"{arguments['path']}:{arguments.get('line', '')}"
    else:
        what = f"{len(arguments.get('paths', []))} files" if "paths" in arguments else ""
    return f"{planned['tool_name']}({what})"
