"""The tools of the built-in exploration: skills the built-in coordinators call."""

from actors.builtin.importers import (
    Definition,
    FoundImporter,
    ImportersInput,
    ImportersOutput,
    Reexport,
    SymbolImporters,
    find_importers,
)

__all__ = [
    "Definition",
    "FoundImporter",
    "ImportersInput",
    "ImportersOutput",
    "Reexport",
    "SymbolImporters",
    "find_importers",
]
