"""The Jinja environments (HTML with autoescaping, Markdown with Markdown escaping) and the render entry points.

The templates live in the checkout's top-level ``templates/`` folder, which the wheel ships as
``torchscan/templates`` (see ``[tool.setuptools]`` in ``pyproject.toml``); `template_folder` finds either. A folder
of overrides (same file names) is searched first when given.
"""

from __future__ import annotations

import html
import json
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ...views import Cell, layer_label
from ..review.wording import count_text

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: Characters with a meaning in Markdown inline syntax; backslash escapes are valid CommonMark and Python-Markdown.
MARKDOWN_SPECIAL = "\\`*_[]"
#: Characters written as entities: HTML must never pass through, and ``|`` would split a table cell.
MARKDOWN_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "&#124;"}


def markdown_escape(value: Any) -> str:
    """Text that renders literally in Markdown (names, messages, types): no HTML, no emphasis, no links."""
    if isinstance(value, Markup):
        return str(value)
    if value is None:
        return ""
    text = " ".join(str(value).splitlines())
    padded = f" {text} "  # a space before the first character and after the last
    out = []
    for position, char in enumerate(text, 1):
        if char in MARKDOWN_ENTITIES:
            out.append(MARKDOWN_ENTITIES[char])
        elif char in MARKDOWN_SPECIAL and _needs_escape(char, padded[position - 1], padded[position + 1]):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _needs_escape(char: str, before: str, after: str) -> bool:
    """Keep names readable: ``self_attn`` and ``[1, 3]`` are literal already (an intraword ``_`` is never
    emphasis, and a bracket is only syntax when a link target follows it); everything else is escaped."""
    if char == "_":
        return not (before.isalnum() and after.isalnum())
    if char == "[":
        return False
    if char == "]":
        return after in "([:"
    return True


def _sort_key(cell: Cell) -> str:
    if cell.sort is None:
        return ""
    return str(int(cell.sort)) if float(cell.sort).is_integer() else repr(float(cell.sort))


def html_attribute(value: Any) -> Markup:
    """Text for an HTML attribute inside Markdown (a tooltip): entities, never Markdown escapes or a table ``|``."""
    text = " ".join(str(value).split())
    return Markup(html.escape(text, quote=True).replace("|", "&#124;"))


def capitalize_first(value: Any) -> str:
    text = str(value)
    return text[:1].upper() + text[1:]


@lru_cache(maxsize=1)
def template_folder() -> Path:
    """``torchscan/templates`` in an installed wheel, else the ``templates/`` folder of this checkout."""
    for folder in (PACKAGE_ROOT / "templates", PACKAGE_ROOT.parent / "templates"):
        if (folder / "page.html.j2").is_file():
            return folder
    raise FileNotFoundError(f"the torchscan-report templates are missing: neither {PACKAGE_ROOT / 'templates'} "
                            f"(an installed wheel) nor {PACKAGE_ROOT.parent / 'templates'} (a checkout) exists")


@lru_cache(maxsize=8)
def environment(kind: str, overrides: str | None = None) -> jinja2.Environment:
    """The environment for ``kind`` ("html" or "md"), with an optional folder of template overrides."""
    loaders: list[jinja2.BaseLoader] = [jinja2.FileSystemLoader(str(template_folder()))]
    if overrides:
        loaders.insert(0, jinja2.FileSystemLoader(overrides))
    if kind not in ("html", "md"):
        raise ValueError(f"unknown template kind {kind!r}")
    markdown = kind == "md"
    env = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), undefined=jinja2.StrictUndefined,
                             autoescape=not markdown, finalize=markdown_escape if markdown else None,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters.update({"status_class": lambda cell: f"s-{cell.status}", "sort_key": _sort_key, "md": markdown_escape,
                        "layer_label": layer_label, "pretty": partial(json.dumps, indent=2, sort_keys=True),
                        "raw": Markup, "attr": html_attribute, "capitalize_first": capitalize_first,
                        "count": count_text})
    return env


def render(template: str, overrides: Path | None = None, **context: Any) -> str:
    """Render ``template`` (its suffix, ``.html.j2`` or ``.md.j2``, picks the environment)."""
    kind = "html" if template.endswith(".html.j2") else "md"
    text = environment(kind, str(overrides) if overrides else None).get_template(template).render(**context)
    return text.rstrip("\n") + "\n"


def output_kind(path: Path) -> str:
    """``html`` or ``md`` from an output file name; anything else is a usage error."""
    suffix = path.suffix.lower()
    if suffix in (".html", ".htm"):
        return "html"
    if suffix in (".md", ".markdown"):
        return "md"
    raise ValueError(f"cannot tell the output format of {path.name!r}: use a .html or .md file name")
