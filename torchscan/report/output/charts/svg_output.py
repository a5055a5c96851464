"""From a painter to the chart's inline SVG: deterministic matplotlib settings and the SVG made fit for a page.

matplotlib draws through its object API (``matplotlib.figure.Figure``, no pyplot state) and its SVG backend, with
fixed sizes, a fixed hash salt and no metadata dates. The SVG is then made fit for inline use: text and axes in
``currentColor`` (the page's light or dark text colour), a transparent background, ids unique per chart, a
``<title>`` and ``role="img"``, no scripts and no external references.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .chart import Chart, Painter
from .style import INK

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

#: A fixed salt for the ids matplotlib derives from hashes (marker definitions): the same bytes every build.
SVG_RC: dict[RcKeyType, Any] = {"svg.hashsalt": "torchscan", "svg.fonttype": "none", "svg.id": None}
MISSING_MATPLOTLIB = "Chart not drawn: matplotlib is not installed (pip install 'torchscan[site]')."


def draw(chart: Chart, painter: Painter) -> Chart:
    """The chart with its SVG, or with a note instead when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        chart.notes.append(MISSING_MATPLOTLIB)
        return chart
    with drawing_settings():
        chart.svg = inline_svg(painter().svg(), chart.title, chart.summary)
    return chart


@contextmanager
def drawing_settings() -> Iterator[None]:
    """matplotlib's defaults plus ours, whatever the user's matplotlibrc says; restored afterwards. rcParams are
    process-global, but every chart sets the same values, so concurrent drawing in threads agrees."""
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update({key: value for key, value in SVG_RC.items() if key in matplotlib.rcParams})
        yield


def inline_svg(raw: str, title: str, description: str) -> str:
    """matplotlib's SVG made fit for inline use in a page (see the module docstring): one line, deterministic."""
    text = raw[raw.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    text = re.sub(r"<style[^>]*>.*?</style>", "", text, flags=re.DOTALL)
    text = re.sub(r"\s*\n\s*", " ", text)
    text = re.sub(r">\s+<", "><", text).replace("<defs></defs>", "")
    prefix = "ts" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:10] + "-"
    referenced = set(re.findall(r"url\(#([^)]+)\)", text)) | set(re.findall(r'href="#([^"]+)"', text))
    text = re.sub(r' id="([^"]+)"',
                  lambda match: f' id="{prefix}{match.group(1)}"' if match.group(1) in referenced else "", text)
    text = text.replace("url(#", f"url(#{prefix}").replace('href="#', f'href="#{prefix}')
    text = text.replace(INK, "currentColor")
    opening = re.match(r"<svg[^>]*>", text)
    size = opening and re.search(r'width="([\d.]+)pt" height="([\d.]+)pt" viewBox="([^"]+)"', opening.group(0))
    if opening is None or size is None:
        raise ValueError("unexpected SVG from matplotlib: no root element with a size")
    root = (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
            f'width="{size.group(1)}pt" height="{size.group(2)}pt" viewBox="{size.group(3)}" role="img" '
            f'aria-label="{html.escape(title)}" class="torchscan-chart-svg" '
            f'style="max-width:100%;height:auto;stroke-linejoin:round;stroke-linecap:butt">'
            f"<title>{html.escape(title)}</title><desc>{html.escape(description)}</desc>")
    return root + text[opening.end():]
