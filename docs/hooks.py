"""MkDocs hooks of the TorchScan documentation: the parts of the pages that are generated from the code.

Registered in ``mkdocs.yml`` with ``hooks: [docs/hooks.py]``.

- ``on_page_markdown`` replaces ``<!-- torchscan:diagnostic-codes -->`` with the table of diagnostic codes from
  :data:`torchscan.diagnostics.CODES` and ``<!-- torchscan:metric-units -->`` with the table of metric units from
  :data:`torchscan.results.METRIC_UNITS`, so the reference pages cannot drift from the code, and
  ``<!-- torchscan:schema-link -->`` with a link to the published schema file. ``<!-- torchscan:third-party-handlers
  -->`` and ``<!-- torchscan:third-party-support -->`` become the classes recognized in other libraries and the
  models the tests analyzed, from ``third-party-support.json`` (the tests write it and check it against the code).
  It also shows the snippet lines of fenced code blocks as written (`show_snippet_examples`): the raw pages keep
  them exactly as a reader copies them, and only the build escapes them from the snippets extension.
- ``on_files`` publishes the JSON Schema shipped inside the package (``torchscan/report.schema.json``) beside
  these pages, so ``schema.md`` can link to ``report.schema.json`` and the link is checked like any other.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any

try:
    import torchscan  # noqa: F401
except ImportError:  # build the docs of a checkout where torchscan is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchscan.diagnostics import CODES
from torchscan.integrations.support import SUPPORT_FILE, handlers_table, support_tables
from torchscan.results import METRIC_UNITS

DIAGNOSTIC_CODES_MARKER = "<!-- torchscan:diagnostic-codes -->"
METRIC_UNITS_MARKER = "<!-- torchscan:metric-units -->"
SCHEMA_LINK_MARKER = "<!-- torchscan:schema-link -->"
THIRD_PARTY_HANDLERS_MARKER = "<!-- torchscan:third-party-handlers -->"
THIRD_PARTY_SUPPORT_MARKER = "<!-- torchscan:third-party-support -->"
SCHEMA_URI = "report.schema.json"


def table_cell(text: str) -> str:
    """Text that is safe inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def diagnostic_codes_table() -> str:
    """Code / severity / meaning, one row per code, in the order the codes are defined."""
    rows = ["| Code | Default severity | Meaning |", "| --- | --- | --- |"]
    rows += [f"| `{code}` | {severity} | {table_cell(meaning)} |" for code, (severity, meaning) in CODES.items()]
    return "\n".join(rows)


def metric_units_table() -> str:
    """Every module-estimate field with its unit, in report order."""
    rows = ["| Field | Unit |", "| --- | --- |"]
    rows += [f"| `{name}` | {unit} |" for name, unit in METRIC_UNITS.items()]
    return "\n".join(rows)


def schema_link() -> str:
    """The link to the schema file that :func:`on_files` publishes beside the pages."""
    return f"This site publishes the file as [{SCHEMA_URI}]({SCHEMA_URI})."


def third_party_support() -> dict[str, Any]:
    """The third-party data file beside these pages, which the tests write and check."""
    return json.loads((Path(__file__).resolve().parent / SUPPORT_FILE).read_text(encoding="utf-8"))


#: marker -> what replaces it. Without this hook a marker is an invisible HTML comment, never a broken link.
GENERATED = {
    DIAGNOSTIC_CODES_MARKER: diagnostic_codes_table,
    METRIC_UNITS_MARKER: metric_units_table,
    SCHEMA_LINK_MARKER: schema_link,
    THIRD_PARTY_HANDLERS_MARKER: lambda: handlers_table(third_party_support()),
    THIRD_PARTY_SUPPORT_MARKER: lambda: support_tables(third_party_support()),
}


#: A line that pymdownx.snippets replaces with a file (``--8<-- "costs/catalog.md:catalog"``, or a block marker),
#: and a section marker it removes (``<!-- --8<-- [start:totals] -->``): where the extension's ``;`` escape goes.
SNIPPET_LINE = re.compile(r"""^(?P<pre>[ \t]*)(?=-+8<-+(?:[ \t]+(?:"[^"\n]+"|'[^'\n]+'))?[ \t]*$)""")
SECTION_MARKER = re.compile(r"^(?P<pre>.*?)(?=-+8<-+[ \t]*\[(?:start|end):[^\]]+\])")
FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def show_snippet_examples(markdown: str) -> str:
    """Inside fenced code blocks, a snippet line is an example to show, not a file to include: escape it with the
    snippets extension's own ``;`` here, just before the extension runs, which takes the ``;`` away again. The raw
    page keeps the line exactly as a reader copies it; lines outside fences are includes and are left alone."""
    lines = markdown.split("\n")
    fence = ""
    for index, line in enumerate(lines):
        match = FENCE.match(line)
        if match and not fence:
            fence = match["fence"]
        elif match and match["fence"][0] == fence[0] and len(match["fence"]) >= len(fence) and not match["info"].strip():
            fence = ""
        elif fence:
            lines[index] = SECTION_MARKER.sub(r"\g<pre>;", SNIPPET_LINE.sub(r"\g<pre>;", line, count=1), count=1)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each generation marker with its content, and show the snippet examples of code blocks as written;
    other pages pass through unchanged."""
    for marker, build in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, build())
    return show_snippet_examples(markdown) if "8<-" in markdown else markdown


def shipped_schema() -> bytes:
    """The JSON Schema file exactly as the installed package ships it."""
    return resources.files("torchscan").joinpath(SCHEMA_URI).read_bytes()


def schema_uri(docs_dir: str) -> str:
    """Where the schema goes: beside these pages, which are the site's root or, when another site copies them
    into a folder of its own (the ``torchscan-report`` catalog does), that folder."""
    pages = Path(__file__).resolve().parent
    try:
        folder = pages.relative_to(Path(docs_dir).resolve()).as_posix()
    except ValueError:  # the hook file lives outside the documentation folder
        folder = "."
    return SCHEMA_URI if folder == "." else f"{folder}/{SCHEMA_URI}"


def on_files(files: Any, config: Any) -> Any:
    """Add the shipped JSON Schema to the site, byte for byte, so that ``schema.md`` can link to it."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, schema_uri(config["docs_dir"]), content=shipped_schema()))
    return files
