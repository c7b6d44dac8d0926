"""The classification coordinator: what kind of task is this, how hard, and what to look for.

Victor's system-prompt coordinator, made deterministic: plain rules over the task text
(no model), so the same message always yields the same ``task`` dict.
"""

from __future__ import annotations

import re
from typing import Any

from coordinators import ContextSnapshot, CoordinatorResult, TransitionBatch
from coordinators.builtin._common import append_trail, message_text

__all__ = ["ClassificationCoordinator", "classify", "extract_keywords", "MAX_KEYWORDS", "GENERAL_TASK", "TASK_TYPES"]

MAX_KEYWORDS = 8

#: (task type, rule) in priority order: the first match is the type, all matches the intents.
_TYPE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("locate_definition", re.compile(
        r"\b(?:defined|definition|declared|declaration|implemented|implementation of"
        r"|where\s+(?:is|are|does|do)|which\s+file|locate)\b", re.I)),
    ("find_usages", re.compile(
        r"\b(?:usages?|uses\s+of|used|callers?|call\s+sites?|references?|who\s+calls"
        r"|called\s+from|invoked)\b", re.I)),
    ("trace_imports", re.compile(
        r"\b(?:imports?|imported|importing|import\s+chain|dependenc(?:y|ies)|depends\s+on"
        r"|module\s+graph)\b", re.I)),
    ("explain", re.compile(
        r"\b(?:explain|how\s+(?:does|do|is)|what\s+(?:does|is)|why|describe|overview"
        r"|walk\s+me\s+through|understand)\b", re.I)),
)

#: The type of a task no rule matches.
GENERAL_TASK = "general"
#: Every task type, in priority order: the one list the rule-based and the model-backed
#: classifiers (``actors.callers.llm``) share.
TASK_TYPES: tuple[str, ...] = (*(name for name, _ in _TYPE_RULES), GENERAL_TASK)

_BROAD = re.compile(r"\b(?:all|every|entire|whole|across|architecture|overall)\b", re.I)

_BACKTICKED = re.compile(r"`([^`\n]+)`")
_QUOTED = re.compile(r"\"([^\"\n]+)\"|(?<!\w)'([^'\n]+)'(?!\w)")
_TOKEN = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?!\w|\.\w)")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]{2,}")
_CONTRACTION = re.compile(r"(?:n't|'s|'re|'ve|'ll|'d|'m)\b", re.I)  # "doesn't" -> "does"


def _is_camel(token: str) -> bool:
    """``FooBar``, ``HTTPServer``, ``fooBar``: mixed case, two capitals or an inner one."""
    if "_" in token or "." in token or not any(c.islower() for c in token):
        return False
    capitals = sum(c.isupper() for c in token)
    return capitals >= 2 or (capitals == 1 and not token[0].isupper())


def _is_snake(token: str) -> bool:
    return "." not in token and re.search(r"[A-Za-z0-9]_+[A-Za-z0-9]", token) is not None


#: Token kinds in priority order (after backticked and quoted strings).
_TOKEN_KINDS = (
    _is_camel,
    _is_snake,
    lambda token: "." in token and all(len(part) >= 2 for part in token.split(".")),
)

_STOP_WORDS = frozenset("""
a about above after again all also an and any are around as at be because been before being
below between both but by can could did do does doing done down during each either every explain
few find for from further get give got had has have having here how i if in into is it its itself
just let like list locate look made make many me might more most much must my need no nor not now
of off on once only or other our out over own please same see shall she should show so some such
tell than that the their them then there these they this those through to too under until up upon
us use used uses using very via want was way we were what when where which while who whom whose
why will with within without would you your code file files repo repository project function
functions class classes method methods module modules package defined definition definitions
declared implemented implementation usage usages caller callers reference references import
imports imported importing trace chain call calls called work works describe overview understand
walk through thing things part parts happen happens happening handle handles handled back
""".split())


def extract_keywords(text: str, limit: int = MAX_KEYWORDS) -> list[str]:
    """Search terms from ``text``, best first: backticked, quoted, CamelCase, snake_case,
    dotted.names, then significant words (stop words dropped); deduplicated, at most ``limit``."""
    found: list[str] = []
    seen: set[str] = set()

    def add(term: str) -> None:
        term = term.strip().strip(".,:;!?()[]{}")
        if len(term) >= 2 and term.lower() not in seen:
            seen.add(term.lower())
            found.append(term)

    for pattern in (_BACKTICKED, _QUOTED):
        for match in pattern.finditer(text):
            add(next(group for group in match.groups() if group is not None))
    rest = _BACKTICKED.sub(" ", _CONTRACTION.sub("", text))
    rest = _QUOTED.sub(" ", rest)  # quoted words are not searched again
    tokens = _TOKEN.findall(rest)
    for kind in _TOKEN_KINDS:
        for token in tokens:
            if kind(token):
                add(token)
    for token in tokens:  # plain words: no kind above, not a stop word
        if _WORD.fullmatch(token) and token.lower() not in _STOP_WORDS:
            add(token)
    return found[:limit]


def classify(text: str) -> dict[str, Any]:
    """The ``task`` dict for ``text``: type, intents, complexity, keywords and the text itself."""
    intents = [name for name, rule in _TYPE_RULES if rule.search(text)]
    keywords = extract_keywords(text)
    words = len(text.split())
    if words > 40 or len(intents) >= 3 or len(keywords) >= 6 or _BROAD.search(text):
        complexity = "complex"
    elif words <= 12 and len(intents) <= 1 and len(keywords) <= 2:
        complexity = "simple"
    else:
        complexity = "moderate"
    return {
        "type": intents[0] if intents else GENERAL_TASK,
        "intents": intents,
        "complexity": complexity,
        "keywords": keywords,
        "message": text,
    }


class ClassificationCoordinator:
    """Classifies the task into ``task``, enters stage "exploring", hands off to exploration."""

    name = "classification"

    async def process(self, snapshot: ContextSnapshot, message: Any) -> CoordinatorResult:
        """Classify ``message`` (the task); reads nothing else from the snapshot but the trail."""
        task = classify(message_text(message))
        keywords = ", ".join(task["keywords"]) or "none"
        reasoning = (
            f"task is {task['type']} ({task['complexity']}); keywords: {keywords}"
        )
        batch = TransitionBatch().update_state("task", task).update_stage("exploring")
        append_trail(batch, snapshot, self.name, reasoning)
        confidence = 0.9 if task["keywords"] and task["type"] != GENERAL_TASK else 0.6
        return CoordinatorResult(
            transitions=batch, reasoning=reasoning, confidence=confidence, handoff_to="exploration"
        )
