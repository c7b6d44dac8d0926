"""The real code skills driving the four pure built-in coordinators on a fixture repository.

No Ray: the skills are called in-process by the fake executor of the pure run loop, which
proves that what the skills return is what exploration digests.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from actors.builtin import CODE_SKILLS
from coordinators import AgentState
from coordinators.builtin import default_coordinators
from tests.coordinators.builtin_fakes import run_loop


def execute(tool_name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
    """Run the named skill in-process, as a subagent would, and dump its output."""
    skill = CODE_SKILLS[tool_name]
    input_type = typing.get_type_hints(skill)["inp"]
    try:
        return skill(input_type(**arguments)).model_dump(), False
    except ValueError as exc:
        return {"error": str(exc)}, True


def fixture_repo(root: Path, outside: Path) -> Path:
    files = {
        "shop/__init__.py": "",
        "shop/pricing.py": "import math\n\n\nclass PriceRule:\n    def apply(self, total):\n        return total\n",
        "shop/cart.py": "from .pricing import PriceRule\n\n\ndef checkout(total):\n    return PriceRule().apply(total)\n",
        "shop/api.py": "from shop.cart import checkout\n",
        "build/PriceRule.py": "class PriceRule: pass\n",
        ".gitignore": "build/\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (outside / "rules.py").write_text("class PriceRule: pass\n")
    (root / "shop" / "vendor").symlink_to(outside)
    return root


async def test_real_skills_locate_the_definition_and_the_import_edge(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "outside").mkdir()
    root = fixture_repo(tmp_path / "repo", tmp_path / "outside")
    state = AgentState(conversation_state={"root": str(root)})
    state, _ = await run_loop(state, default_coordinators(), execute, "Where is `PriceRule` defined and who imports it?")
    assert state.conversation_stage == "complete"
    summary = state.conversation_state["summary"]
    assert summary["headline"][0] == "PriceRule (class) defined at shop/pricing.py:4"
    assert [d["ref"] for d in summary["definitions"]] == ["shop/pricing.py:4"]  # not build/, not vendor/
    assert ("shop.cart", "shop.pricing", "shop/cart.py:1") in [
        (e["importer"], e["imported"], e["ref"]) for e in summary["imports"]
    ]
    facts = state.conversation_state["files"]
    assert facts["shop/vendor"]["escapes_root"] is True
    assert len(state.conversation_state["calls_made"]) == len(set(state.conversation_state["calls_made"]))
