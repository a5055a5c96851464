"""A catalog of hundreds of entries: tag facets, the chart that names only its extremes, and model pages kept out
of the global navigation above the threshold (without MkDocs reporting them)."""

from __future__ import annotations

import re
from pathlib import Path

import pathspec
from catalogs import FAILED_EVERY, catalog_site, synthetic_catalog

from torchscan.report.output.charts import catalog_charts
from torchscan.report.output.charts.catalog_comparison import LABEL_ALL
from torchscan.report.site.mkdocs_site import (
    MODEL_PAGES_PATTERN,
    NAV_MODEL_PAGES,
    SiteContent,
    _catalog_nav,
    not_in_nav,
)


def test_tag_counts_list_each_tag_once_with_its_entries(tmp_path: Path) -> None:
    catalog = synthetic_catalog(tmp_path, 8)
    assert catalog.tag_counts == {"narrow": 6, "odd": 4, "wide": 2}


def test_a_scatter_of_many_points_names_the_extremes_and_the_rest_on_hover(tmp_path: Path) -> None:
    entries = 120
    scatter, _ = catalog_charts(synthetic_catalog(tmp_path, entries))
    drawn = entries - entries // FAILED_EVERY
    hovers = re.findall(r'<circle [^>]*fill-opacity="0"><title>([^<]*)</title></circle>', scatter.svg)
    labels = re.findall(r"<text [^>]*>(net-[^<]*)</text>", scatter.svg)
    # The widths grow with the index: the first and last drawn entries are the extremes of both axes. The last three
    # lie less than a marker apart: one point, named after its extreme, the three names on its hover.
    assert sorted(labels) == ["net-0000", "net-0119 ×3"]
    assert hovers[-1].startswith("net-0117, net-0118, net-0119: ")
    named = [name for title in hovers for name in title.split(": ")[0].split(", ")]
    assert len(named) == len(set(named)) == drawn - 1  # every drawn run but net-0000 is named on hover, once
    assert hovers[0].startswith("net-0001: 23 parameters, ") and hovers[0].endswith(" MACs")
    assert "Only the extremes are named" in scatter.summary


def test_a_small_scatter_names_every_point(tmp_path: Path) -> None:
    scatter, _ = catalog_charts(synthetic_catalog(tmp_path, LABEL_ALL - 1))
    assert "<circle" not in scatter.svg and "Only the extremes" not in scatter.summary


def pages(count: int) -> SiteContent:
    content = SiteContent(title="t", section="Models")
    content.model_pages = [(f"m{index}", f"models/m{index}.md") for index in range(count)]
    return content


def test_model_pages_leave_the_navigation_above_the_threshold() -> None:
    few, many = pages(NAV_MODEL_PAGES), pages(NAV_MODEL_PAGES + 1)
    assert few.model_pages_in_nav and not many.model_pages_in_nav
    assert len(_catalog_nav(few, [], standalone=True)[0]["Models"]) == NAV_MODEL_PAGES
    assert _catalog_nav(many, [], standalone=True) == []
    assert _catalog_nav(many, ["methodology/index.md"]) == [{"Models": [{"Catalog": "index.md"}]},
                                                            {"Methodology": ["methodology/index.md"]}]
    assert not_in_nav(few, None) == ""
    assert not_in_nav(many, None) == MODEL_PAGES_PATTERN + "\n"
    user = pathspec.GitIgnoreSpec.from_lines(["drafts/"])
    assert not_in_nav(many, user) == "drafts/\n" + MODEL_PAGES_PATTERN + "\n"
    assert not_in_nav(few, user) == "drafts/\n"


def test_a_site_of_many_model_pages_builds_strictly_without_them_in_the_navigation(tmp_path: Path) -> None:
    site, warnings = catalog_site(tmp_path, NAV_MODEL_PAGES + 10)
    assert warnings == []
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="models/net-0000.html"' in home  # from the catalog table
    assert not re.search(r'<a href="models/[^"]*" class="md-nav__link', home)  # nor from the navigation
    assert (site / "models" / f"net-{NAV_MODEL_PAGES + 9:04d}.html").is_file()
