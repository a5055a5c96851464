"""What MkDocs' part of a build reuses: the previous site when none of its inputs changed (MkDocs not run), else
the conversion and search entries of unchanged model pages. Either way the site is the same bytes as a full,
uncached build's; a changed entry, a changed template or a deleted or edited site file builds the site again."""

from __future__ import annotations

import re
from pathlib import Path

from builds import REGISTRY, build_into, overridden_templates, setup_registry

from torchscan.report.output.render_cache import PAGES_FOLDER
from torchscan.report.runs.result_cache import CACHE_FOLDER

KEPT = "site unchanged: kept the previous build's site files (MkDocs not run)"


def pages_reused(progress: str) -> tuple[int, int] | None:
    """``(reused, model pages)`` when MkDocs ran, ``None`` when the site was kept."""
    found = re.search(r"MkDocs reused the conversion of (\d+) of (\d+) model pages?", progress)
    assert found is not None or KEPT in progress, progress
    return (int(found.group(1)), int(found.group(2))) if found else None


def test_an_unchanged_build_keeps_the_site_with_the_bytes_of_a_full_build(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    cold, progress = build_into(tmp_path, "site")
    assert pages_reused(progress) == (0, 4)
    assert re.search(r"writing [\d.]+ s\), MkDocs [\d.]+ s$", progress, re.MULTILINE), progress
    kept, progress = build_into(tmp_path, "site")
    assert pages_reused(progress) is None
    # MkDocs did not run, and the timing line says so instead of timing it: keeping the site is TorchScan's part.
    assert re.search(r"site kept [\d.]+ s, writing [\d.]+ s\), MkDocs not run$", progress, re.MULTILINE), progress
    assert not re.search(r"MkDocs [\d.]+ s", progress), progress
    assert kept == cold
    uncached, progress = build_into(tmp_path, "uncached", use_cache=False)
    assert pages_reused(progress) == (0, 4) and uncached == cold
    # The kept site's page conversions are carried too: the next build with a changed entry reuses them.
    assert len(list((tmp_path / "site" / CACHE_FOLDER / PAGES_FOLDER).glob("*.json.gz"))) == 8


def test_a_changed_entry_reuses_the_other_pages_and_gives_the_bytes_of_a_full_build(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    before, _ = build_into(tmp_path, "site")
    build_into(tmp_path, "site")  # kept: the page conversions must survive it
    (tmp_path / "models.toml").write_text(REGISTRY.replace("width = 3", "width = 5"), encoding="utf-8")
    changed, progress = build_into(tmp_path, "site")
    assert pages_reused(progress) == (3, 4)
    assert changed["models/second.html"] != before["models/second.html"]
    full, _ = build_into(tmp_path, "full", use_cache=False)
    assert changed == full


def test_a_deleted_or_edited_site_file_builds_the_site_again(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    cold, _ = build_into(tmp_path, "site")
    (tmp_path / "site" / "models" / "second.html").unlink()
    again, progress = build_into(tmp_path, "site")
    assert pages_reused(progress) == (4, 4)
    assert again == cold
    (tmp_path / "site" / "search" / "search_index.json").write_text("{}", encoding="utf-8")
    again, progress = build_into(tmp_path, "site")
    assert pages_reused(progress) == (4, 4)
    assert again == cold


def test_a_changed_template_builds_the_site_again(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    build_into(tmp_path, "site")
    overrides = overridden_templates(tmp_path)
    files, progress = build_into(tmp_path, "site", templates=overrides)
    assert pages_reused(progress) == (0, 4)
    assert b"Overridden footer." in files["models/second.html"]
    full, _ = build_into(tmp_path, "full", use_cache=False, templates=overrides)
    assert files == full


def test_an_unchanged_build_links_the_previous_files_instead_of_writing_them_again(tmp_path: Path) -> None:
    """Kept files are the previous output's files (same inode), so replacing that output frees nothing of them."""
    setup_registry(tmp_path)
    build_into(tmp_path, "site")
    site = tmp_path / "site"
    kept = ["index.html", "models/second.html", "markdown/catalog.md", "catalog.json",
            *(path.relative_to(site).as_posix() for path in (site / CACHE_FOLDER).rglob("*.gz")),
            *(path.relative_to(site).as_posix() for path in (site / CACHE_FOLDER).glob("*.json")
              if path.name not in ("last-good.json", "site.json"))]
    inodes = {relative: (site / relative).stat().st_ino for relative in kept}
    build_into(tmp_path, "site")
    assert {relative: (site / relative).stat().st_ino for relative in kept} == inodes
