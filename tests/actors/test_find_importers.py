"""``find_importers`` on the fixture package ``tests/fixtures/importers/shapes`` (no Ray).

Every way of importing ``shapes.core.Circle`` or its module is in the fixture: package
re-exports, relative imports (one and two levels), ``import pkg.mod as m``, star imports
(and a star import of a star import), conditional and function-local imports, and an
``import pkg`` with a ``pkg.Circle`` attribute; beside them modules that only look similar.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from actors.builtin import ImportersInput, SymbolImporters, find_importers

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "importers" / "shapes"


@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    """A copy of the fixture package, plus what cannot be committed: an ignored importer,
    a file that does not parse and a symlinked importer outside the root."""
    root = tmp_path / "shapes"
    shutil.copytree(FIXTURE, root)
    (root / ".gitignore").write_text("ignored_user.py\n")
    (root / "ignored_user.py").write_text("from shapes.core import Circle\n")
    (root / "broken.py").write_text("def oops(:  # Circle\n    pass\n")
    outside = tmp_path / "outside.py"
    outside.write_text("from shapes.core import Circle\n")
    os.symlink(outside, root / "escape.py")
    return root


def answer(root: Path, symbol: str) -> SymbolImporters:
    [result] = find_importers(ImportersInput(root=str(root), symbols=[symbol])).results
    return result


def importers(result: SymbolImporters) -> dict[str, tuple[str, str]]:
    return {i.importer: (f"{i.path}:{i.line}", i.how) for i in result.importers}


def test_every_importer_of_a_name_is_found_once_with_file_and_line(shapes: Path) -> None:
    result = answer(shapes, "Circle")
    assert result.kind == "symbol" and result.modules == ["shapes.core"] and not result.truncated
    assert importers(result) == {
        "shapes": ("__init__.py:2", "from"),                      # the package re-export itself
        "shapes.rel": ("rel.py:1", "from"),                       # relative import
        "shapes.alias_mod": ("alias_mod.py:2", "import"),         # import shapes.core as c
        "shapes.star": ("star.py:1", "star"),                     # from shapes.core import *
        "shapes.sub.via_star": ("sub/via_star.py:1", "reexport"),  # * from a module that got it by *
        "shapes.cond": ("cond.py:4", "from"),                     # inside try
        "shapes.typed": ("typed.py:4", "reexport"),               # inside if TYPE_CHECKING, via the package
        "shapes.lazy": ("lazy.py:2", "reexport"),                 # inside a function, via the package
        "shapes.attr": ("attr.py:1", "attribute"),                # import shapes; shapes.Circle
        "shapes.sub.deep": ("sub/deep.py:1", "from"),             # from ..core import Circle as C
        "shapes.sub.from_module": ("sub/from_module.py:1", "from-module"),  # from shapes import core
    }
    flags = {i.importer: (i.conditional, i.local) for i in result.importers}
    assert flags["shapes.cond"] == (True, False)
    assert flags["shapes.typed"] == (True, False)
    assert flags["shapes.lazy"] == (False, True)


def test_look_alikes_ignored_files_and_files_outside_the_root_are_not_importers(shapes: Path) -> None:
    found = importers(answer(shapes, "Circle"))
    # not_user imports the package but never reads shapes.Circle; unrelated imports another name
    # of another module; other only has a method called Circle
    for module in ("shapes.not_user", "shapes.unrelated", "shapes.other", "shapes.ignored_user", "shapes.escape"):
        assert module not in found


def test_a_file_that_does_not_parse_is_reported_and_the_rest_still_answered(shapes: Path) -> None:
    out = find_importers(ImportersInput(root=str(shapes), symbols=["Circle"]))
    assert any(e.startswith("broken.py: SyntaxError") for e in out.errors)
    assert any(e.startswith("escape.py:") and "escapes root" in e for e in out.errors)
    assert len(out.results[0].importers) == 11


def test_the_definition_is_the_class_and_re_exports_are_reported_as_such(shapes: Path) -> None:
    result = answer(shapes, "Circle")
    assert [(d.path, d.line, d.kind) for d in result.definitions] == [("core.py", 4, "class")]
    reexports = {r.module: (r.path, r.line, r.public) for r in result.reexports}
    assert reexports["shapes"] == ("__init__.py", 2, True)       # package re-export, public
    assert reexports["shapes.star"] == ("star.py", 1, False)     # holds it, does not re-export on purpose
    assert "shapes.other" not in reexports
    assert "shapes.cond" not in [d.module for d in result.definitions]  # "except ImportError: Circle = None"
    alias = answer(shapes, "Round")  # Round = Circle: an alias, never a definition
    assert alias.definitions == [] and [(r.path, r.line, r.source) for r in alias.reexports] == [("core.py", 13, "Circle")]


def test_a_dotted_name_restricts_the_definition_to_that_module(shapes: Path) -> None:
    assert [d.module for d in answer(shapes, "shapes.core.Circle").definitions] == ["shapes.core"]
    assert answer(shapes, "shapes.other.Circle").kind == "unknown"  # a method is no module-level name


def test_a_module_is_answered_with_the_modules_that_import_it(shapes: Path) -> None:
    result = answer(shapes, "shapes.core")
    assert result.kind == "module" and result.modules == ["shapes.core"]
    # a name imported from the package's re-export does not import shapes.core itself
    assert importers(result) == {
        "shapes": ("__init__.py:2", "from"),
        "shapes.rel": ("rel.py:1", "from"),
        "shapes.alias_mod": ("alias_mod.py:2", "import"),
        "shapes.star": ("star.py:1", "star"),
        "shapes.cond": ("cond.py:4", "from"),
        "shapes.sub.deep": ("sub/deep.py:1", "from"),
        "shapes.sub.from_module": ("sub/from_module.py:1", "from-module"),
    }
    assert answer(shapes, "other").modules == ["shapes.other"]  # a unique leaf name


def test_an_unknown_symbol_says_so(shapes: Path) -> None:
    result = answer(shapes, "Hexagon")
    assert result.kind == "unknown" and result.importers == [] and result.definitions == []


def test_a_bound_on_files_marks_the_answer_incomplete(shapes: Path) -> None:
    out = find_importers(ImportersInput(root=str(shapes), symbols=["Circle"], max_files=3))
    assert out.truncated and out.results[0].truncated
