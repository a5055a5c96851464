"""Every ``python`` example in ``docs/`` runs, and the generated parts of the site cannot drift from the code.

Each page's ``python`` blocks execute in order in one fresh namespace, with a temporary directory as the working
directory, so a page reads like a script. A block whose fence has a title (``title="models.toml"``, in any
language) shows a file: it is written under that name in the working directory, in page order, instead of being
executed. A block is skipped only when the line right before its fence is ``<!-- not executed: <reason> -->``
with a non-empty reason.
"""

from __future__ import annotations

import importlib.util
import linecache
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

OPENING_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]*)")
FENCE_TITLE = re.compile(r'title="(?P<title>[^"]+)"')
SKIP_MARKER = re.compile(r"^\s*<!--\s*not executed:(?P<reason>.*?)-->\s*$")
SKIP_MARKER_PREFIX = re.compile(r"^\s*<!--\s*not executed\b")

#: Pages whose examples exercise features that are still being built: page -> reason (xfail, not strict).
UNFINISHED: dict[str, str] = {}


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # the line right before the fence when it is a "not executed" comment
    title: str | None = None  # a file name: the block shows that file's content

    @property
    def skip_reason(self) -> str | None:
        if self.marker is None:
            return None
        match = SKIP_MARKER.match(self.marker)
        return match.group("reason").strip() if match else ""


def fenced_blocks(text: str, page: str) -> list[Block]:
    """The fenced code blocks of a Markdown page, dedented by their fence's indentation (admonitions, tabs)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = OPENING_FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        closing = re.compile(rf"^{re.escape(indent)}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[index + 1:end]]
        previous = lines[index - 1] if index > 0 else ""
        marker = previous if SKIP_MARKER_PREFIX.match(previous) else None
        title = FENCE_TITLE.search(lines[index][opening.end():])
        blocks.append(Block(page, index + 1, opening.group("lang").lower(), "\n".join(body) + "\n", marker,
                            title.group("title") if title else None))
        index = end + 1
    return blocks


def doc_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def page_name(path: Path) -> str:
    return path.relative_to(DOCS).as_posix()


def python_blocks(path: Path) -> list[Block]:
    return [block for block in fenced_blocks(path.read_text(encoding="utf-8"), page_name(path))
            if block.language == "python"]


def page_params() -> list:
    params = []
    for path in doc_pages():
        name = page_name(path)
        marks = [pytest.mark.xfail(reason=UNFINISHED[name], strict=False)] if name in UNFINISHED else []
        params.append(pytest.param(path, id=name, marks=marks))
    return params


def compile_block(path: Path, block: Block):
    """Compile a block so that tracebacks point at the page's own line numbers and show its source."""
    filename = f"docs/{block.page}"
    page_lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    linecache.cache[filename] = (len(page_lines), None, page_lines, filename)
    return compile("\n" * block.line + block.code, filename, "exec")


# -- the examples run --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", page_params())
def test_page_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # files a page shows (my_models.py) import as in a project
    namespace: dict[str, object] = {"__name__": "__main__"}
    try:
        for block in fenced_blocks(path.read_text(encoding="utf-8"), page_name(path)):
            if block.skip_reason is not None:
                continue
            if block.title is not None:
                target = tmp_path / block.title
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.code, encoding="utf-8")
            elif block.language == "python":
                exec(compile_block(path, block), namespace)  # noqa: S102 - running our own documentation
    finally:
        forget_modules_under(tmp_path)  # two pages may both show a my_models.py


def forget_modules_under(folder: Path) -> None:
    """Drop imported modules whose source lives in ``folder``, so the next page imports its own files."""
    for name, module in list(sys.modules.items()):
        source = getattr(module, "__file__", None)
        if source and Path(source).resolve().is_relative_to(folder.resolve()):
            del sys.modules[name]


def test_every_skipped_block_gives_a_reason() -> None:
    unexplained = [f"{block.page}:{block.line}" for path in doc_pages()
                   for block in fenced_blocks(path.read_text(encoding="utf-8"), page_name(path))
                   if block.skip_reason == ""]
    assert unexplained == []


def test_the_block_parser_finds_indented_blocks_and_markers() -> None:
    text = textwrap.dedent("""\
        !!! example
            ```python
            x = 1
            ```
        <!-- not executed: needs a GPU -->
        ```python
        raise SystemExit
        ```
        <!-- not executed: -->
        ```python
        pass
        ```
        ```bash
        echo hi
        ```
        ```toml title="models.toml"
        [catalog]
        ```
        """)
    blocks = fenced_blocks(text, "example.md")
    assert [(b.language, b.line, b.skip_reason, b.title) for b in blocks] == [
        ("python", 2, None, None), ("python", 6, "needs a GPU", None), ("python", 10, "", None),
        ("bash", 13, None, None), ("toml", 16, None, "models.toml")]
    assert blocks[0].code == "x = 1\n" and blocks[4].code == "[catalog]\n"


def test_the_core_pages_have_examples() -> None:
    for page in ("index.md", "model-support.md", "methodology.md", "conventions.md", "schema.md"):
        runnable = [block for block in python_blocks(DOCS / page) if block.skip_reason is None and not block.title]
        assert runnable, f"{page} has no executed python example"


# -- the generated parts of the site -----------------------------------------------------------------------------


def load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("torchscan_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_diagnostic_code_table_is_generated_from_the_code() -> None:
    from torchscan.diagnostics import CODES

    hooks = load_hooks()
    page = (DOCS / "schema.md").read_text(encoding="utf-8")
    assert hooks.DIAGNOSTIC_CODES_MARKER in page and hooks.SCHEMA_LINK_MARKER in page
    rendered = hooks.on_page_markdown(page, page=None, config=None, files=None)
    assert hooks.DIAGNOSTIC_CODES_MARKER not in rendered
    rows = [line for line in rendered.splitlines() if line.startswith("| `")]
    codes = [re.match(r"\| `([a-z_]+)`", row).group(1) for row in rows if re.match(r"\| `([a-z_]+)` \| ", row)]
    assert set(CODES) <= set(codes)
    for code, (severity, meaning) in CODES.items():
        assert f"| `{code}` | {severity} | {meaning} |" in rendered


def test_the_metric_unit_table_is_generated_from_the_code() -> None:
    from torchscan.results import METRIC_UNITS

    hooks = load_hooks()
    rendered = hooks.on_page_markdown(hooks.METRIC_UNITS_MARKER, page=None, config=None, files=None)
    for name, unit in METRIC_UNITS.items():
        assert f"| `{name}` | {unit} |" in rendered


def test_pages_without_markers_are_left_alone() -> None:
    hooks = load_hooks()
    text = "# Title\n\nNothing generated here.\n"
    assert hooks.on_page_markdown(text, page=None, config=None, files=None) == text


def test_a_site_built_with_the_hooks_publishes_the_schema_and_the_tables(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    hooks = load_hooks()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(
        f"# Codes\n\n{hooks.DIAGNOSTIC_CODES_MARKER}\n\n{hooks.SCHEMA_LINK_MARKER}\n", encoding="utf-8")
    config_file = tmp_path / "mkdocs.yml"
    config_file.write_text(
        f"site_name: hooks test\nhooks: [{(DOCS / 'hooks.py').as_posix()}]\n", encoding="utf-8")
    config = load_config(str(config_file), strict=True)  # a link to a missing file would fail the build
    build(config)

    site = tmp_path / "site"
    shipped = (ROOT / "torchscan" / "report.schema.json").read_bytes()
    assert (site / hooks.SCHEMA_URI).read_bytes() == shipped
    html = (site / "index.html").read_text(encoding="utf-8")
    assert "<code>module_forward_error</code>" in html and hooks.DIAGNOSTIC_CODES_MARKER not in html
    assert f'href="{hooks.SCHEMA_URI}"' in html


def test_the_schema_lands_beside_the_pages_when_another_site_copies_them_into_a_folder() -> None:
    hooks = load_hooks()
    assert hooks.schema_uri(str(DOCS)) == "report.schema.json"
    assert hooks.schema_uri(str(ROOT)) == "docs/report.schema.json"  # as if the site's docs_dir held docs/
    assert hooks.schema_uri(str(ROOT / "templates")) == "report.schema.json"  # unrelated folder: the root


# -- the reference pages cover what the code accepts --------------------------------------------------------------


def test_the_cli_page_documents_every_command_and_option() -> None:
    import argparse

    from torchscan.report.cli import parser

    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    commands = next(action for action in parser()._actions if isinstance(action, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        assert f"## `{name}`" in page, f"cli.md has no section for {name}"
        for action in command._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page, f"cli.md does not document {name} {option}"


def test_the_registry_page_documents_every_key() -> None:
    from torchscan.report.registry import checks, jobs, parallel, parsing, placement

    page = (DOCS / "registry.md").read_text(encoding="utf-8")
    for key in (*parsing.CATALOG_KEYS, *parsing.SITE_KEYS, *parsing.ENTRY_KEYS, *jobs.VARIANT_KEYS,
                *parallel.PARALLEL_KEYS):
        assert f"| `{key}` |" in page, f"registry.md does not document the key {key}"
    for name in (*checks.DTYPE_NAMES, *placement.DEVICES):
        assert f"`{name}`" in page or f'`"{name}"`' in page, f"registry.md does not mention {name}"


def test_convention_snippets_have_no_relative_links() -> None:
    # docs/conventions/*.md are included into conventions.md (pymdownx snippets) and, in a generated site whose
    # methodology sits in a folder, also checked as files of their own: a relative link resolves from two places,
    # so it breaks one of the two strict MkDocs builds (site_models' main job failed on one).
    links = [(page_name(path), target) for path in sorted((DOCS / "conventions").glob("*.md"))
             for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text(encoding="utf-8"))]
    assert not [link for link in links if not link[1].startswith(("http://", "https://", "#"))]
