"""The embedding recipe of ``docs/embedding.md`` works as the raw file writes it: its configuration and its page,
copied from the file, build a stock Material site with ``pymdownx.snippets`` that shows the included sections. The
raw file needs no escape undone (the docs' own build escapes its examples, `hooks.show_snippet_examples`), and
every snippet section the generated files mark is listed on the page."""

from __future__ import annotations

import importlib.util
import io
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import markdown
import pytest

from torchscan.report.build import BuildOptions, build
from torchscan.report.output.templates import template_folder
from torchscan.report.registry.parsing import load_registry
from torchscan.report.runs.progress import Progress

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGE = DOCS / "embedding.md"
MODELS = """from torch import nn


def conv_net():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 10))
"""
REGISTRY = '[[models]]\nname = "conv-net"\nfactory = "embedding_models:conv_net"\ninput_shape = [3, 16, 16]\n'
#: A section marker of a generated file (``<!-- --8<-- [start:totals] -->``), its name up to a template expression.
SECTION = re.compile(r"\[start:(?P<name>[a-z-]+)")


def load_hooks() -> ModuleType:
    """The docs' MkDocs hooks (``docs/hooks.py``), loaded as MkDocs loads them."""
    spec = importlib.util.spec_from_file_location("torchscan_embedding_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def block_after(text: str, anchor: str, language: str) -> str:
    """The first fenced ``language`` block after ``anchor`` on the page, exactly as the raw file holds it."""
    opening = text.index(f"```{language}\n", text.index(anchor)) + len(language) + 4
    return text[opening:text.index("```\n", opening)]


def test_the_raw_page_holds_the_include_lines_as_a_reader_copies_them() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert ";--8<--" not in text
    page = block_after(text, "and include a section by file and name", "markdown")
    assert '\n--8<-- "costs/catalog.md:catalog"\n' in page and '\n--8<-- "costs/conv-net.md:summary"\n' in page


def test_the_docs_site_shows_the_include_lines_instead_of_running_them(tmp_path: Path) -> None:
    """Our own site builds the page with snippets and ``check_paths: true``: the hook escapes the examples just before
    the extension runs, which shows them as written; without it, the build would look for ``costs/catalog.md``."""
    text = PAGE.read_text(encoding="utf-8")
    options = {"extensions": ["fenced_code", "pymdownx.snippets"],
               "extension_configs": {"pymdownx.snippets": {"base_path": [str(tmp_path)], "check_paths": True}}}
    with pytest.raises(Exception, match="costs/catalog.md"):
        markdown.markdown(text, **options)
    html = markdown.markdown(load_hooks().show_snippet_examples(text), **options)
    assert "--8&lt;-- &quot;costs/catalog.md:catalog&quot;" in html and ";--8&lt;--" not in html


def test_the_hook_escapes_fenced_examples_only() -> None:
    show = load_hooks().show_snippet_examples
    page = ('--8<-- "a.md"\n\n```markdown\n--8<-- "b.md:x"\n  --8<-- \'c.md\'\n<!-- --8<-- [start:totals] -->\n'
            'text --8<-- "d.md"\n```\n\n--8<-- "e.md"\n````text\n```\n--8<-- "f.md"\n````\n')
    assert show(page) == ('--8<-- "a.md"\n\n```markdown\n;--8<-- "b.md:x"\n  ;--8<-- \'c.md\'\n'
                          '<!-- ;--8<-- [start:totals] -->\ntext --8<-- "d.md"\n```\n\n--8<-- "e.md"\n````text\n```\n'
                          ';--8<-- "f.md"\n````\n')


def test_every_snippet_section_of_the_generated_files_is_listed() -> None:
    marked = {match["name"] for path in template_folder().rglob("*.md.j2")
              for match in SECTION.finditer(path.read_text(encoding="utf-8"))}
    assert {"training", "memory", "summary", "entries"} <= marked
    listed = PAGE.read_text(encoding="utf-8").split("| File | Sections |")[1].split("\n\n")[0]
    assert sorted(name for name in marked if f"`{name}`" not in listed) == []


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``torchscan-report build`` of one entry named as on the page (``conv-net``), in this process."""
    folder = tmp_path_factory.mktemp("embedding")
    (folder / "embedding_models.py").write_text(MODELS, encoding="utf-8")
    (folder / "models.toml").write_text(REGISTRY, encoding="utf-8")
    sys.modules.pop("embedding_models", None)
    build(load_registry(folder / "models.toml"), BuildOptions(output=folder / "site", jobs=1, timeout=120),
          Progress(io.StringIO()), executor_factory=lambda jobs, timeout: ThreadPoolExecutor(max_workers=1))
    return folder / "site"


def test_the_recipe_copied_from_the_raw_page_builds_a_material_site_that_shows_the_snippets(built: Path,
                                                                                          tmp_path: Path) -> None:
    text = PAGE.read_text(encoding="utf-8")
    layout = block_after(text, "Copy the two folders into your documentation", "text")
    extensions = block_after(text, "Then enable snippets with your `docs` folder as the base path", "yaml")
    page = block_after(text, "and include a section by file and name from any page in `docs/costs/`", "markdown")
    assert "costs/" in layout and "index.md" in layout and "reports/" in layout
    project = tmp_path / "project"
    shutil.copytree(built / "markdown", project / "docs" / "costs")  # as the layout block places them
    shutil.copytree(built / "reports", project / "docs" / "reports")
    (project / "docs" / "costs" / "index.md").write_text(page, encoding="utf-8")
    (project / "mkdocs.yml").write_text(f"site_name: Our project\ntheme:\n  name: material\n{extensions}",
                                        encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", "site"], cwd=project,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    html = (project / "site" / "costs" / "index.html").read_text(encoding="utf-8")
    catalog = (built / "markdown" / "catalog.md").read_text(encoding="utf-8")
    assert "<table>" in html and "8<" not in html.split('class="md-content"')[1]
    assert "Factory</th>" in html and "embedding_models:conv_net" in html  # the summary section
    assert "conv-net" in catalog and "conv-net" in html.split('class="md-content"')[1]  # the catalog section's row
