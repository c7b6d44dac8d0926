"""A whole multi-turn exploration, simulated purely: the four built-ins, `reduce`, and a fake
executor with hard-coded tool outputs (the loop documented in `coordinators.builtin`)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import coordinators.builtin as builtin
from coordinators import Coordinator
from coordinators.builtin import DEFAULT_FIRST, default_coordinators
from tests.coordinators.builtin_fakes import ROOT, run_loop, search_output, state_with


def fact(path: str, **extra: Any) -> dict[str, Any]:
    return {"path": path, "size": 200, "is_binary": False, "is_symlink": False,
            "symlink_target": None, "escapes_root": False, **extra}


CANNED = {
    "list_tree": {"entries": [
        fact("shop/__init__.py"), fact("shop/cart.py"), fact("shop/pricing.py"),
        fact("shop/vendor", is_symlink=True, symlink_target="/opt/vendor", escapes_root=True),
    ], "truncated": False},
    "PriceRule": {"hits": [
        {"path": "shop/cart.py", "line": 2, "text": "from shop.pricing import PriceRule", "symbol_kind": None},
        {"path": "shop/pricing.py", "line": 14, "text": "class PriceRule:", "symbol_kind": "class"},
        {"path": "shop/vendor/rules.py", "line": 1, "text": "class PriceRule:", "symbol_kind": "class"},
    ]},
    "apply_discount": {"hits": [
        {"path": "shop/pricing.py", "line": 30, "text": "def apply_discount(total):", "symbol_kind": "def"},
    ]},
    "importers": {
        "PriceRule": {
            "symbol": "PriceRule", "kind": "symbol", "modules": ["shop.pricing"],
            "definitions": [{"module": "shop.pricing", "path": "shop/pricing.py", "line": 14, "kind": "class"}],
            "reexports": [{"module": "shop", "source": "shop.pricing", "path": "shop/__init__.py", "line": 1, "public": True}],
            "importers": [
                {"importer": "shop", "imported": "shop.pricing", "path": "shop/__init__.py", "line": 1, "how": "from"},
                {"importer": "shop.cart", "imported": "shop.pricing", "path": "shop/cart.py", "line": 2, "how": "from"},
            ],
        },
    },
    "python_imports": {
        "edges": [{"importer": "shop.cart", "imported": "shop.pricing", "path": "shop/cart.py", "line": 2}],
        "modules": {"shop.cart": "shop/cart.py", "shop.pricing": "shop/pricing.py"},
    },
}


def outputs(tool_name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
    assert arguments["root"] == ROOT
    if tool_name == "search_code":
        return search_output({k: v["hits"] for k, v in CANNED.items() if "hits" in v}, arguments), False
    if tool_name == "read_excerpt":
        line = arguments["line"]
        return {"path": arguments["path"], "start_line": line - 5, "end_line": line + 5, "lines": ["..."]}, False
    if tool_name == "find_importers":
        unknown = {"kind": "unknown", "importers": [], "definitions": [], "reexports": []}
        return {"results": [CANNED["importers"].get(s, {**unknown, "symbol": s}) for s in arguments["symbols"]]}, False
    return CANNED[tool_name], False


async def test_a_whole_run_ends_complete_with_a_summary_naming_file_and_line() -> None:
    task = "Where is `PriceRule` defined, and who imports the module with apply_discount?"
    state, steps = await run_loop(state_with(), default_coordinators(), outputs, task)
    assert state.conversation_stage == "complete"
    assert steps[-1][0] == "coordination" and not steps[-1][1].should_continue
    summary = state.conversation_state["summary"]
    assert "PriceRule (class) defined at shop/pricing.py:14" in summary["headline"]
    assert "apply_discount (def) defined at shop/pricing.py:30" in summary["headline"]
    # every importer of the symbol asked about, each with file:line; the same statement is not
    # repeated among the other edges seen
    assert [(e["importer"], e["imported"], e["ref"]) for e in summary["importers"]] == [
        ("shop", "shop.pricing", "shop/__init__.py:1"), ("shop.cart", "shop.pricing", "shop/cart.py:2"),
    ]
    assert summary["imports"] == []
    assert "2 module(s) import PriceRule or its module: shop, shop.cart" in summary["headline"]
    assert "PriceRule re-exported by shop at shop/__init__.py:1" in summary["headline"]
    # the copy in the escaping vendor directory is a search hit, not a module-level definition
    assert [d["ref"] for d in summary["definitions"] if d["symbol"] == "PriceRule"] == ["shop/pricing.py:14"]
    # safety blocked the excerpt through the escaping symlink; nothing was ever called twice
    [blocked] = summary["blocked"]
    assert blocked["arguments"]["path"] == "shop/vendor/rules.py"
    assert blocked["reason"].startswith("symlink_escape:")
    calls = state.conversation_state["calls_made"]
    assert len(calls) == len(set(calls)) == summary["calls_made"]
    assert not state.pending_tool_calls
    names = [name for name, _ in steps]
    assert names[:3] == ["classification", "exploration", "safety"]
    assert {entry["coordinator"] for entry in summary["trail"]} == {
        "classification", "exploration", "safety", "coordination",
    }
    assert any(entry["reasoning"] == "nothing new to explore" or
               entry["reasoning"].endswith("; nothing new to explore") for entry in summary["trail"])


async def test_a_run_without_keywords_still_completes() -> None:
    state, _ = await run_loop(state_with(), default_coordinators(), outputs, "hello there")
    assert state.conversation_stage == "complete"
    assert state.conversation_state["summary"]["headline"] == ["nothing matched the task's keywords"]


def test_exports_and_defaults() -> None:
    assert builtin.__all__ == sorted(builtin.__all__)
    assert DEFAULT_FIRST == "classification"
    coordinators = default_coordinators()
    assert [c.name for c in coordinators] == ["classification", "exploration", "safety", "coordination"]
    assert all(isinstance(c, Coordinator) for c in coordinators)


def test_builtins_import_only_the_core_and_pure_stdlib() -> None:
    allowed = {"__future__", "collections.abc", "dataclasses", "json", "posixpath", "re", "typing", "coordinators"}
    for module in Path(builtin.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name in allowed or name.startswith("coordinators."), f"{module.name} imports {name}"
