"""The code skills on small trees built in ``tmp_path``: no Ray, milliseconds each."""

from __future__ import annotations

import builtins
import os
from pathlib import Path

import pytest

from actors.builtin import glob_to_regex, is_ignored, parse_gitignore
from actors.builtin import (
    CODE_SKILLS,
    ExcerptInput,
    ImportsInput,
    PathOutsideRoot,
    SearchInput,
    TreeInput,
    list_tree,
    python_imports,
    read_excerpt,
    resolve_inside,
    search_code,
)


def make(root: Path, files: dict[str, str | bytes]) -> Path:
    """Write ``files`` (relative path -> text or bytes) under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def paths(root: Path) -> list[str]:
    return [entry.path for entry in list_tree(TreeInput(root=str(root))).entries]


# --- gitignore -------------------------------------------------------------------------


def test_gitignore_globs_anchoring_dirs_and_comments(tmp_path: Path) -> None:
    make(tmp_path, {
        ".gitignore": "# a comment\n*.log\n/top.txt\nbuild/\ndocs/**/*.tmp\n\n",
        "a.log": "x", "sub/b.log": "x", "top.txt": "x", "sub/top.txt": "x",
        "build/out.py": "x", "sub/build/out.py": "x", "build.py": "x",
        "docs/x.tmp": "x", "docs/deep/er/y.tmp": "x", "docs/keep.md": "x",
    })
    assert paths(tmp_path) == [
        ".gitignore", "build.py", "docs/keep.md", "sub/top.txt",
    ]


def test_gitignore_negation_and_nested_files(tmp_path: Path) -> None:
    make(tmp_path, {
        ".gitignore": "*.txt\n!keep.txt\n",
        "a.txt": "x", "keep.txt": "x",
        "pkg/.gitignore": "!b.txt\nsecret/\n",
        "pkg/b.txt": "x", "pkg/c.txt": "x", "pkg/secret/s.py": "x", "other/secret/s.py": "x",
    })
    assert paths(tmp_path) == [
        ".gitignore", "keep.txt", "other/secret/s.py", "pkg/.gitignore", "pkg/b.txt",
    ]


def test_excluded_directory_cannot_be_reincluded() -> None:
    rules = parse_gitignore("logs/\n!logs/keep.log\n")
    assert is_ignored(rules, "logs", is_dir=True)
    assert glob_to_regex("a/**/b") == "a/(?:.*/)?b"


def test_always_skipped_directories(tmp_path: Path) -> None:
    make(tmp_path, {
        ".git/config": "x", "__pycache__/m.pyc": "x", ".venv/lib.py": "x",
        "node_modules/p/i.js": "x", "src/__pycache__/n.pyc": "x", "src/m.py": "x",
    })
    assert paths(tmp_path) == ["src/m.py"]


# --- search_code -----------------------------------------------------------------------


def test_literal_search_escapes_regex_characters(tmp_path: Path) -> None:
    make(tmp_path, {"m.py": "x = a.b(1)\ny = axb(1)\n"})
    out = search_code(SearchInput(root=str(tmp_path), pattern="a.b("))
    assert [(hit.path, hit.line) for hit in out.hits] == [("m.py", 1)]


def test_regex_search_and_case_sensitivity(tmp_path: Path) -> None:
    make(tmp_path, {"m.py": "def Load_Config():\n    load_config = 1\n"})
    regex = search_code(SearchInput(root=str(tmp_path), pattern=r"load_\w+", regex=True))
    assert [hit.line for hit in regex.hits] == [1, 2]
    strict = search_code(
        SearchInput(root=str(tmp_path), pattern=r"load_\w+", regex=True, case_sensitive=True)
    )
    assert [hit.line for hit in strict.hits] == [2]


def test_invalid_regex_names_the_pattern(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"invalid regex '\(unclosed'"):
        search_code(SearchInput(root=str(tmp_path), pattern="(unclosed", regex=True))


def test_definitions_are_marked(tmp_path: Path) -> None:
    make(tmp_path, {"m.py": (
        "class Widget:\n    def widget_id(self): pass\n"
        "def make_widget():\n    return Widget()\nWIDGET = 3\nw = Widget()\n"
        "    local_widget = 1\nclass WidgetFactory:\n"
    )})
    out = search_code(SearchInput(root=str(tmp_path), pattern=r"\w*widget\w*", regex=True))
    kinds = {hit.line: hit.symbol_kind for hit in out.hits}
    assert kinds == {1: "class", 2: "def", 3: "def", 4: None, 5: "def", 6: None, 7: None, 8: "class"}
    partial = search_code(SearchInput(root=str(tmp_path), pattern="Widget", case_sensitive=True))
    assert {hit.line: hit.symbol_kind for hit in partial.hits} == {1: "class", 4: None, 6: None, 8: None}


def test_glob_filters_files(tmp_path: Path) -> None:
    make(tmp_path, {"a.py": "needle", "b.txt": "needle", "src/c.py": "needle"})
    assert [h.path for h in search_code(SearchInput(root=str(tmp_path), pattern="needle",
                                                    glob="*.py")).hits] == ["a.py", "src/c.py"]
    assert [h.path for h in search_code(SearchInput(root=str(tmp_path), pattern="needle",
                                                    glob="src/**/*.py")).hits] == ["src/c.py"]


def test_binary_and_oversized_files_are_skipped(tmp_path: Path) -> None:
    make(tmp_path, {"bin.dat": b"needle\x00\x01", "big.py": "needle\n" * 100, "ok.py": "needle"})
    out = search_code(SearchInput(root=str(tmp_path), pattern="needle", max_file_bytes=100))
    assert [hit.path for hit in out.hits] == ["ok.py"]
    reasons = {s.path: s.reason for s in out.skipped}
    assert reasons["bin.dat"] == "binary file"
    assert reasons["big.py"].startswith("too large (700 bytes > 100)")
    assert out.files_scanned == 1


def test_unreadable_files_are_reported_not_raised(tmp_path: Path, monkeypatch) -> None:
    make(tmp_path, {"locked.py": "needle", "ok.py": "needle"})
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "broken").symlink_to(tmp_path / "missing")
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        if str(file).endswith("locked.py"):
            raise PermissionError(13, "Permission denied")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    out = search_code(SearchInput(root=str(tmp_path), pattern="needle"))
    assert [hit.path for hit in out.hits] == ["ok.py"]
    reasons = {s.path: s.reason for s in out.skipped}
    assert reasons["locked.py"] == "unreadable: Permission denied"
    assert reasons["pipe"] == "not a regular file"
    assert reasons["broken"].startswith("unreadable")


def test_max_hits_sets_truncated(tmp_path: Path) -> None:
    make(tmp_path, {"m.py": "needle\n" * 10})
    out = search_code(SearchInput(root=str(tmp_path), pattern="needle", max_hits=3))
    assert len(out.hits) == 3 and out.truncated
    assert not search_code(SearchInput(root=str(tmp_path), pattern="needle")).truncated


def test_search_never_follows_a_symlink_out_of_root(tmp_path: Path) -> None:
    outside = make(tmp_path / "outside", {"secret.py": "needle"})
    root = make(tmp_path / "root", {"inside.py": "needle"})
    (root / "leak.py").symlink_to(outside / "secret.py")
    (root / "leakdir").symlink_to(outside)
    (root / "alias.py").symlink_to(root / "inside.py")
    out = search_code(SearchInput(root=str(root), pattern="needle"))
    assert sorted(hit.path for hit in out.hits) == ["alias.py", "inside.py"]
    reasons = {s.path: s.reason for s in out.skipped}
    assert reasons == {"leak.py": "symlink escapes root", "leakdir": "symlink escapes root"}


# --- list_tree -------------------------------------------------------------------------


def test_list_tree_facts_flag_symlink_escapes(tmp_path: Path) -> None:
    outside = make(tmp_path / "outside", {"secret.txt": "s"})
    root = make(tmp_path / "root", {"a.py": "abc", "img.png": b"\x89PNG\x00"})
    (root / "leak").symlink_to(outside)
    (root / "alias.py").symlink_to("a.py")
    facts = {f.path: f for f in list_tree(TreeInput(root=str(root))).entries}
    assert facts["a.py"].size == 3 and not facts["a.py"].is_binary
    assert facts["img.png"].is_binary
    assert facts["leak"].is_symlink and facts["leak"].escapes_root
    assert facts["leak"].symlink_target == os.path.realpath(outside)
    assert facts["alias.py"].symlink_target == "a.py" and not facts["alias.py"].escapes_root
    assert facts["alias.py"].size == 3


def test_list_tree_caps_set_truncated(tmp_path: Path) -> None:
    make(tmp_path, {f"f{i}.py": "" for i in range(5)} | {"a/b/c/deep.py": ""})
    assert list_tree(TreeInput(root=str(tmp_path), max_entries=3)).truncated
    shallow = list_tree(TreeInput(root=str(tmp_path), max_depth=1))
    assert shallow.truncated and "a/b/c/deep.py" not in [e.path for e in shallow.entries]
    assert not list_tree(TreeInput(root=str(tmp_path))).truncated


# --- read_excerpt and containment ------------------------------------------------------


def test_read_excerpt_returns_lines_around_the_hit(tmp_path: Path) -> None:
    make(tmp_path, {"pkg/m.py": "".join(f"line {i}\n" for i in range(1, 21))})
    out = read_excerpt(ExcerptInput(root=str(tmp_path), path="pkg/m.py", line=2, context=3))
    assert (out.path, out.start_line, out.end_line) == ("pkg/m.py", 1, 5)
    assert out.lines == [f"line {i}" for i in range(1, 6)]


def test_read_excerpt_refuses_escapes_binary_and_large(tmp_path: Path) -> None:
    outside = make(tmp_path / "outside", {"secret.py": "s"})
    root = make(tmp_path / "root", {"bin.dat": b"\x00\x01", "big.py": "x" * 50, "ok.py": "x"})
    (root / "leak.py").symlink_to(outside / "secret.py")
    with pytest.raises(PathOutsideRoot, match=r"'\.\./outside/secret\.py' is outside root"):
        read_excerpt(ExcerptInput(root=str(root), path="../outside/secret.py", line=1))
    with pytest.raises(PathOutsideRoot, match="is outside root"):
        read_excerpt(ExcerptInput(root=str(root), path=str(outside / "secret.py"), line=1))
    with pytest.raises(PathOutsideRoot, match="'leak.py' resolves through a symlink"):
        read_excerpt(ExcerptInput(root=str(root), path="leak.py", line=1))
    with pytest.raises(ValueError, match="refusing to read 'bin.dat': binary file"):
        read_excerpt(ExcerptInput(root=str(root), path="bin.dat", line=1))
    with pytest.raises(ValueError, match="refusing to read 'big.py': too large"):
        read_excerpt(ExcerptInput(root=str(root), path="big.py", line=1, max_bytes=10))
    with pytest.raises(ValueError, match="line 9 is past the end of 'ok.py'"):
        read_excerpt(ExcerptInput(root=str(root), path="ok.py", line=9))


def test_resolve_inside_accepts_inner_dotdot_and_absolute_inside(tmp_path: Path) -> None:
    make(tmp_path, {"a/b.py": ""})
    assert resolve_inside(tmp_path, "a/../a/b.py") == (tmp_path / "a/b.py").resolve()
    assert resolve_inside(tmp_path, str(tmp_path / "a/b.py")) == (tmp_path / "a/b.py").resolve()
    with pytest.raises(PathOutsideRoot, match="NUL"):
        resolve_inside(tmp_path, "a\x00b")


# --- python_imports --------------------------------------------------------------------


def test_import_edges_resolve_relative_imports(tmp_path: Path) -> None:
    make(tmp_path, {
        "src/app/__init__.py": "from .core import engine\n",
        "src/app/core/__init__.py": "",
        "src/app/core/engine.py": "import json\nfrom ..util import helpers as h\nfrom . import missing\n",
        "src/app/util/__init__.py": "",
        "src/app/util/helpers.py": "from app.core.engine import run\nfrom ...outside import x\n",
    })
    out = python_imports(ImportsInput(root=str(tmp_path)))
    edges = {(e.importer, e.imported, e.line) for e in out.edges}
    assert edges == {
        ("app", "app.core.engine", 1),
        ("app.core.engine", "json", 1),
        ("app.core.engine", "app.util.helpers", 2),
        ("app.core.engine", "app.core", 3),
        ("app.util.helpers", "app.core.engine", 1),
    }
    assert out.modules["app.core.engine"] == "src/app/core/engine.py"
    assert [(e.path, e.reason) for e in out.errors] == [
        ("src/app/util/helpers.py", "line 2: relative import beyond top-level package")
    ]


def test_syntax_errors_are_reported_and_package_filters(tmp_path: Path) -> None:
    make(tmp_path, {
        "a/__init__.py": "", "a/bad.py": "def broken(:\n", "a/good.py": "import os\n",
        "b/__init__.py": "", "b/m.py": "import sys\n",
    })
    out = python_imports(ImportsInput(root=str(tmp_path), package="a"))
    assert sorted(out.modules) == ["a", "a.bad", "a.good"]
    assert [(e.importer, e.imported) for e in out.edges] == [("a.good", "os")]
    assert out.errors[0].path == "a/bad.py"
    assert out.errors[0].reason.startswith("syntax error: line 1")


def test_max_files_sets_truncated(tmp_path: Path) -> None:
    make(tmp_path, {f"m{i}.py": "import os\n" for i in range(4)})
    out = python_imports(ImportsInput(root=str(tmp_path), max_files=2))
    assert out.truncated and len(out.modules) == 2


def test_code_skills_registry_names() -> None:
    assert sorted(CODE_SKILLS) == ["list_tree", "python_imports", "read_excerpt", "search_code"]


def test_root_that_is_a_package_names_its_modules(tmp_path: Path) -> None:
    root = make(tmp_path / "lib", {"__init__.py": "", "core.py": "from . import util\n", "util.py": ""})
    out = python_imports(ImportsInput(root=str(root), package="lib.core"))
    assert [(e.importer, e.imported) for e in out.edges] == [("lib.core", "lib.util")]


def test_paths_limit_the_parsed_files_but_not_name_resolution(tmp_path: Path) -> None:
    make(tmp_path, {
        "app/__init__.py": "", "app/a.py": "from app import b\nimport json\n", "app/b.py": "import app.c\n",
        "app/c.py": "",
    })
    out = python_imports(ImportsInput(root=str(tmp_path), paths=["app/a.py"]))
    assert [(e.importer, e.imported) for e in out.edges] == [("app.a", "app.b"), ("app.a", "json")]
    assert out.modules == {"app.a": "app/a.py", "app.b": "app/b.py"}


def test_code_skills_register_as_typed_skills_and_import_no_ray() -> None:
    import ast

    import actors.builtin
    from actors import SkillRegistry

    registry = SkillRegistry()
    for name, skill in CODE_SKILLS.items():
        spec = registry.register(name, skill)
        assert spec.input_type.__name__.endswith("Input") and spec.output_type.__name__.endswith("Output")
    for source in ("fs_guard.py", "code_skills.py"):
        tree = ast.parse((Path(actors.builtin.__file__).parent / source).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {name for name in imported if name and name.split(".")[0] == "ray"}
